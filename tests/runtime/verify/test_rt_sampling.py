"""Accept/reject decisions on hand-built logits, and a chi-square test that sampling is lossless."""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.verify import sampling

NEG = float("-inf")


def _logits(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_greedy_accept_hand_built():
    # vocab 10; each target row's argmax is what must match the draft token at that position
    target_logits = _logits(
        [0, 0, 0, 9, 0, 0, 0, 0, 0, 0],    # row 0: argmax 3 -> draft[0] = 3 accepted
        [0, 0, 0, 0, 0, 0, 0, 9, 0, 0],    # row 1: argmax 7 -> draft[1] = 7 accepted
        [0, 9, 0, 0, 0, 0, 0, 0, 0, 0],    # row 2: argmax 1 -> draft[2] = 5 rejected; 1 is recovered
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 9],    # row 3: never reached
    )
    assert sampling.greedy_accept(torch.tensor([3, 7, 5]), target_logits) == (2, 1)
    # all three match -> the bonus token is row 3's argmax
    assert sampling.greedy_accept(torch.tensor([3, 7, 1]), target_logits) == (3, 9)
    # the first token already differs -> nothing accepted, row 0's argmax is recovered
    assert sampling.greedy_accept(torch.tensor([4, 7, 1]), target_logits) == (0, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_greedy_tokens_pick_what_torch_argmax_picks(dtype):
    """The numpy argmax behind greedy decoding resolves ties and NaN as torch's argmax does."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(6, 49152, generator=generator)
    rows[1, 7] = rows[1, 40000] = rows[1].max() + 1          # a tie: the first of the two
    rows[2, 123], rows[2, 9000] = float("inf"), float("nan")  # NaN beats +inf, wherever it is
    rows[3] = float("nan")                                    # all NaN: the first
    rows[4] = NEG                                             # all -inf: the first
    rows[5, 49151] = 1e30                                     # the last element (numpy's tail loop)
    logits = rows.to(dtype)
    expected = logits.argmax(dim=-1).tolist()
    assert expected[1:] == [7, 9000, 0, 0, 49151]
    assert sampling.greedy_tokens(logits) == expected
    assert [sampling.greedy_tokens(row) for row in logits] == expected      # one row: an int each
    assert sampling.greedy_tokens(logits[:, ::3]) == logits[:, ::3].argmax(dim=-1).tolist()  # strided views


def test_rejection_accept_hand_built():
    generator = torch.Generator().manual_seed(0)
    target_probs = sampling.logits_to_probs(_logits(
        [NEG, NEG, 0, NEG, NEG, NEG, NEG, NEG, NEG, NEG],  # row 0: target is certain of 2; draft 2 must be accepted
        [0, 0, NEG, NEG, NEG, NEG, NEG, NEG, NEG, NEG],    # row 1: target gives token 4 zero mass; draft 4 must be rejected
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],                    # row 2: never reached
    ), sampling.SamplingParams(temperature=1.0))
    draft_probs = torch.zeros(2, 10)
    draft_probs[0, 2] = 1.0   # the draft was certain of 2 too: ratio 1, always accepted
    draft_probs[1, 4] = 0.5   # the draft put half its mass on 4 and half on 0
    draft_probs[1, 0] = 0.5
    for _ in range(200):
        accepted, token = sampling.rejection_accept(torch.tensor([2, 4]), draft_probs, target_probs, generator)
        # recovered from max(0, target - draft) at row 1 = {0: 0, 1: 0.5}: always token 1
        assert (accepted, token) == (1, 1)


def test_point_mass_draft_is_rejected_where_target_has_no_mass():
    generator = torch.Generator().manual_seed(1)
    # row 0: target uniform over {0, 1}; the n-gram draft proposes 5, which the target never emits
    target_probs = sampling.logits_to_probs(_logits([0, 0, NEG, NEG, NEG, NEG], [0, 0, 0, 0, 0, 0]),
                                            sampling.SamplingParams(temperature=1.0))
    seen = set()
    for _ in range(100):
        accepted, token = sampling.rejection_accept(torch.tensor([5]), None, target_probs, generator)
        assert accepted == 0 and token in (0, 1)
        seen.add(token)
    assert seen == {0, 1}


def test_top_k_and_top_p_filtering():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = sampling.logits_to_probs(logits, sampling.SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(top2, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # top_p 0.8: 0.5 alone < 0.8, 0.5 + 0.3 reaches it, so exactly {0, 1} stay
    nucleus = sampling.logits_to_probs(logits, sampling.SamplingParams(temperature=1.0, top_p=0.8))
    assert torch.allclose(nucleus, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # a tiny top_p keeps the most likely token only
    tiny = sampling.logits_to_probs(logits, sampling.SamplingParams(temperature=1.0, top_p=0.01))
    assert torch.equal(tiny, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    # temperature sharpens: at T=0.5 the ratio between tokens 0 and 1 is squared
    sharp = sampling.logits_to_probs(logits, sampling.SamplingParams(temperature=0.5))
    assert sharp[0, 0] / sharp[0, 1] == pytest.approx((0.5 / 0.3) ** 2, rel=1e-5)


def _chi_square_p_value(counts, expected_probs):
    from scipy.stats import chisquare

    keep = expected_probs > 0
    assert counts[~keep].sum() == 0, "a token with zero target probability was sampled"
    expected = expected_probs[keep] * counts.sum()
    return chisquare(counts[keep].numpy(), expected.numpy()).pvalue


@pytest.mark.parametrize("point_mass", [False, True], ids=["draft-probs", "point-mass"])
def test_speculative_sampling_matches_the_target_distribution(point_mass):
    """Vocab 16, k = 3: the token committed at each position follows the target's distribution."""
    vocab, k, batch = 16, 3, 40_000
    generator = torch.Generator().manual_seed(1234)
    target_probs = torch.rand(k + 1, vocab, generator=generator) ** 3
    target_probs[:, 0] = 0.0                                    # one token the target never emits
    target_probs /= target_probs.sum(-1, keepdim=True)
    # a draft that is related to the target but wrong in places, with mass where the target has none
    draft_probs = 0.6 * target_probs[:k] + 0.4 * torch.rand(k, vocab, generator=generator).softmax(-1)
    draft_ids = torch.multinomial(draft_probs.repeat(batch, 1), 1, generator=generator).view(batch, k)
    accepted, next_token = sampling.rejection_accept_batch(
        draft_ids, None if point_mass else draft_probs.expand(batch, k, vocab),
        target_probs.expand(batch, k + 1, vocab), generator)
    # Rows are context-free here, so the token committed at position j, given that the step
    # reached j (all earlier drafts accepted), must follow target_probs[j].
    committed = torch.cat([draft_ids, torch.zeros(batch, 1, dtype=torch.long)], dim=1)
    committed[torch.arange(batch), accepted] = next_token
    for position in range(k + 1):
        reached = accepted >= position
        assert int(reached.sum()) >= 10_000 or point_mass and position > 0
        if int(reached.sum()) < 1000:
            continue
        counts = torch.bincount(committed[reached, position], minlength=vocab).float()
        assert _chi_square_p_value(counts, target_probs[position]) > 1e-3, f"position {position}"


def test_chi_square_detects_a_lossy_sampler():
    """The same test rejects accepting every draft token (it would follow the draft instead)."""
    vocab, batch = 16, 10_000
    generator = torch.Generator().manual_seed(7)
    target_probs = torch.rand(vocab, generator=generator) ** 3
    target_probs /= target_probs.sum()
    draft_probs = torch.rand(vocab, generator=generator).softmax(-1)
    lossy_tokens = torch.multinomial(draft_probs, batch, replacement=True, generator=generator)
    counts = torch.bincount(lossy_tokens, minlength=vocab).float()
    assert _chi_square_p_value(counts, target_probs + 1e-9) < 1e-6


def test_engine_sampling_is_reproducible_with_a_seed(ngram_engine):
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    kwargs = {"max_new_tokens": 24, "temperature": 0.8, "top_k": 50, "top_p": 0.95}
    first = ngram_engine.generate(prompt, seed=11, **kwargs)
    again = ngram_engine.generate(prompt, seed=11, **kwargs)
    other = ngram_engine.generate(prompt, seed=12, **kwargs)
    assert first.token_ids == again.token_ids
    assert first.token_ids != other.token_ids
    assert first.stats.num_drafts > 0
