"""The grammar room on hand-built drafts over a 16-token vocabulary: where a draft is cut, which
rows are masked, that the matcher keeps only committed tokens, and a chi-square test that
speculative sampling under a grammar follows the masked target distribution."""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.drafters.base import Draft
from trtspec.runtime.verify import sampling
from trtspec.runtime.verify.tree import Tree

# ids 0-9 the digits, 10 '-', 11 'a', 12 '"', 13 '{', 14 '}', 15 end-of-sequence
VOCAB = [str(d) for d in range(10)] + ["-", "a", '"', "{", "}", "</s>"]
EOS = 15


@pytest.fixture(scope="module")
def integer_grammar():
    """{"type": "integer"} compiled for the 16-token vocabulary: '-'? then digits (no leading 0)."""
    import xgrammar

    from trtspec.runtime.grammar.compile import CompiledGrammar, GrammarSpec

    info = xgrammar.TokenizerInfo(VOCAB, vocab_type=xgrammar.VocabType.RAW, vocab_size=16, stop_token_ids=[EOS])
    compiled = xgrammar.GrammarCompiler(info).compile_json_schema('{"type": "integer"}')
    return CompiledGrammar(spec=GrammarSpec.json_schema({"type": "integer"}), compiled=compiled, vocab_size=16)


def _grammar(compiled):
    from trtspec.runtime.grammar.matcher import SequenceGrammar

    return SequenceGrammar(compiled)


def _allowed(row) -> list[int]:
    return row.nonzero().flatten().tolist()


def test_a_chain_is_cut_at_its_first_refused_token(integer_grammar):
    grammar = _grammar(integer_grammar)
    # "-", "4", "a", "2": 'a' is not an integer's, so the draft keeps "-4"
    draft = grammar.constrain(Draft(torch.tensor([10, 4, 11, 2]), draft_probs=torch.rand(4, 16)))
    assert draft.token_ids.tolist() == [10, 4]
    assert draft.draft_probs.shape == (2, 16)
    assert grammar.cut_tokens == 2
    rows = grammar.allowed_rows()
    assert rows.shape == (3, 16)                       # pending + the 2 kept tokens
    assert _allowed(rows[0]) == list(range(11))         # digits or '-' first
    assert _allowed(rows[1]) == list(range(1, 10))      # after '-': a non-zero digit
    assert _allowed(rows[2]) == list(range(10)) + [EOS]  # after "-4": more digits, or the end
    # the matcher holds only committed tokens: nothing yet, so '-' is still allowed
    assert _allowed(grammar.next_allowed()[0]) == list(range(11))


def test_a_draft_refused_from_its_first_token_is_dropped(integer_grammar):
    grammar = _grammar(integer_grammar)
    assert grammar.constrain(Draft(torch.tensor([11, 1]))) is None
    assert grammar.allowed_rows().shape == (1, 16)


def test_a_tree_loses_refused_nodes_with_their_subtrees(integer_grammar):
    grammar = _grammar(integer_grammar)
    tree = Tree([[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]])
    # nodes in tree order: [0]='1', [1]='a' (refused), [2]='0', [0,0]='2', [1,0]='3' (under 'a'), [0,0,0]='-' (refused)
    draft = grammar.constrain(Draft(torch.tensor([1, 11, 0, 2, 3, 10]), tree=tree, score_rank=[0, 1, 2, 3, 4, 5]))
    assert draft.tree.paths == [[0], [2], [0, 0]]
    assert draft.token_ids.tolist() == [1, 0, 2]
    assert draft.score_rank == [0, 2, 3]
    assert grammar.cut_tokens == 3
    rows = grammar.allowed_rows()                        # root, then the kept nodes in the new tree's order
    assert _allowed(rows[1]) == list(range(10)) + [EOS]  # after '1'
    assert _allowed(rows[2]) == [EOS]                    # after '0': nothing but the end
    assert _allowed(rows[3]) == list(range(10)) + [EOS]  # after '12'


def test_masked_logits_pick_the_best_allowed_token(integer_grammar):
    grammar = _grammar(integer_grammar)
    grammar.constrain(Draft(torch.tensor([10])))
    logits = torch.zeros(2, 16)
    logits[:, 11] = 9.0   # the target prefers 'a' everywhere; the grammar does not allow it
    logits[0, 3] = 1.0
    logits[1, 0] = 2.0    # '0' after '-' is not an integer's either
    logits[1, 7] = 1.0
    assert sampling.greedy_tokens(grammar.mask(logits)) == [3, 7]


def test_advance_refuses_a_token_the_masks_did_not_allow(integer_grammar):
    grammar = _grammar(integer_grammar)
    grammar.advance([1, 2])
    with pytest.raises(RuntimeError, match="refused committed token"):
        grammar.advance([11])
    grammar.advance([EOS, 3])  # nothing after the end is taken
    assert grammar.matcher.is_terminated()


def _chi_square_p_value(counts, expected_probs):
    from scipy.stats import chisquare

    keep = expected_probs > 0
    assert counts[~keep].sum() == 0, "a token with zero masked probability was sampled"
    return chisquare(counts[keep].numpy(), (expected_probs[keep] * counts.sum()).numpy()).pvalue


@pytest.mark.parametrize("point_mass", [False, True], ids=["draft-probs", "point-mass"])
def test_sampling_under_a_grammar_follows_the_masked_target(integer_grammar, point_mass):
    """Vocab 16, k = 3, drafts with mass on refused tokens: as the engine does it (cut, mask the
    target and the draft, rejection-sample), the first committed token follows the target's
    masked renormalized distribution, and so does the second after the commonest first."""
    trials, k = 6_000, 3
    generator = torch.Generator().manual_seed(99)
    params = sampling.SamplingParams(temperature=1.0)
    target_logits = torch.randn(k + 1, 16, generator=generator) * 1.5  # rows context-free
    # a draft related to the target but wrong in places, with mass on tokens the grammar refuses
    draft_probs = 0.6 * target_logits[:k].softmax(-1) + 0.4 * torch.randn(k, 16, generator=generator).softmax(-1)
    first, second = [], []
    for _ in range(trials):
        grammar = _grammar(integer_grammar)
        draft_ids = torch.multinomial(draft_probs, 1, generator=generator).squeeze(-1)
        draft = grammar.constrain(Draft(draft_ids, draft_probs=None if point_mass else draft_probs))
        size = draft.size if draft is not None else 0
        target_probs = sampling.logits_to_probs(grammar.mask(target_logits[: 1 + size]), params)
        if size == 0:
            committed = [int(sampling.sample(target_probs[:1], generator)[0])]
        else:
            masked_draft = None if point_mass else grammar.mask_draft_probs(draft.draft_probs)
            accepted, next_token = sampling.rejection_accept(draft.token_ids, masked_draft, target_probs, generator)
            committed = draft.token_ids[:accepted].tolist() + [next_token]
        first.append(committed[0])
        if len(committed) > 1:
            second.append((committed[0], committed[1]))
    reference = _grammar(integer_grammar)
    expected_first = sampling.logits_to_probs(mask_rows(reference, target_logits[:1]), params)[0]
    counts = torch.bincount(torch.tensor(first), minlength=16).float()
    assert _chi_square_p_value(counts, expected_first) > 1e-3
    # the second token, given the commonest non-zero first digit (digits or the end may follow it)
    common = max(range(1, 10), key=lambda t: sum(1 for f, _ in second if f == t))
    after = [s for f, s in second if f == common]
    assert len(after) > 300
    reference.advance([common])
    expected_second = sampling.logits_to_probs(mask_rows(reference, target_logits[1:2]), params)[0]
    counts = torch.bincount(torch.tensor(after), minlength=16).float()
    assert _chi_square_p_value(counts, expected_second) > 1e-3


def mask_rows(grammar, logits):
    return grammar.mask_next(logits)


def test_bounded_strings_refuse_control_characters(tiny_llama):
    """xgrammar 0.2.8 compiles maxLength to [^"\\\r\n]{0,n}, which lets a tab into a JSON string;
    compile_grammar writes the bound as a pattern without control characters instead."""
    from transformers import AutoTokenizer

    from trtspec.runtime.grammar.compile import GrammarSpec, compile_grammar
    from trtspec.runtime.grammar.matcher import SequenceGrammar

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tab, letter, quote = (tokenizer.encode(text) for text in ("\t", "a", '"'))
    assert len(tab) == len(letter) == len(quote) == 1
    grammar = SequenceGrammar(compile_grammar(GrammarSpec.json_schema({"type": "string", "maxLength": 4}),
                                              tokenizer, 512, {tokenizer.eos_token_id}))
    grammar.advance(quote)
    allowed = grammar.next_allowed()[0]
    assert allowed[letter[0]] and not allowed[tab[0]]


def test_an_auto_tool_tag_allows_text_and_only_whole_calls(tiny_llama):
    """tool_choice auto's structural tag (trtspec.serve.openai_tools.auto_tag) on the tiny
    tokenizer: text and end-of-sequence anywhere outside a call; once `{"name": ` is written only
    an offered tool's name, then its arguments without free whitespace (compiled as json_schema is);
    end-of-sequence only after the call's closing brace; text may follow it."""
    from transformers import AutoTokenizer

    from trtspec.runtime.grammar.compile import GrammarSpec, compile_grammar
    from trtspec.runtime.grammar.matcher import SequenceGrammar
    from trtspec.serve.openai_tools import auto_tag

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    eos = tokenizer.eos_token_id
    weather = {"name": "get_weather", "parameters": {
        "type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {"city": {"type": "string", "maxLength": 6}}}}
    spec = GrammarSpec.structural_tag(auto_tag([weather], parallel=True))
    grammar = SequenceGrammar(compile_grammar(spec, tokenizer, 512, {eos}))

    def accepts(text: str) -> bool:
        return all(grammar.matcher.accept_token(t) for t in tokenizer.encode(text))

    def allowed(text: str) -> bool:
        return bool(grammar.next_allowed()[0][tokenizer.encode(text)[0]])

    assert grammar.next_allowed()[0][eos]              # an empty answer, or text: the model's choice
    assert accepts('Sure: {"name":"x"} ')               # not the call's opening (no space): plain text
    assert grammar.next_allowed()[0][eos]
    assert accepts('{"name": ')                        # the opening: a call must follow
    assert not grammar.next_allowed()[0][eos] and allowed('"') and not allowed("x")
    assert accepts('"get_weather", "arguments": {"city": ')
    assert not allowed(" ") and not allowed("\t")      # no free whitespace, no raw tab in the string
    assert accepts('"Oslo"}') and not grammar.next_allowed()[0][eos]
    assert accepts("}") and grammar.next_allowed()[0][eos]
    assert accepts(' and {"name": "get_weather", "arguments": {"city": "Lima"}}')  # parallel: a second call
    single = SequenceGrammar(compile_grammar(GrammarSpec.structural_tag(auto_tag([weather], parallel=False)),
                                             tokenizer, 512, {eos}))
    for token in tokenizer.encode('{"name": "get_weather", "arguments": {"city": "Oslo"}}'):
        assert single.matcher.accept_token(token)
    # after the one call: the grammar is complete (stop_after_first), end-of-sequence only
    assert single.complete and single.next_allowed()[0].nonzero().flatten().tolist() == [eos]


def test_a_structural_tag_with_a_bad_schema_is_refused_in_one_line(tiny_llama):
    from transformers import AutoTokenizer

    from trtspec.runtime.grammar.compile import GrammarError, GrammarSpec, compile_grammar
    from trtspec.serve.openai_tools import auto_tag

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    bad = auto_tag([{"name": "f", "parameters": {"type": "objectx"}}], parallel=True)
    for spec in (GrammarSpec.structural_tag(bad), GrammarSpec("structural_tag", "[1]")):
        with pytest.raises(GrammarError, match="structural tag .*cannot be compiled") as raised:
            compile_grammar(spec, tokenizer, 512, {tokenizer.eos_token_id})
        assert "\n" not in str(raised.value)
