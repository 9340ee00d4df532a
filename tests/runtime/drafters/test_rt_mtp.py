"""mode mtp: the checkpoint's own MTP module drafts for it (tiny seeded DeepSeek-V3 and GLM-4.5 with
MTP weights laid out as DeepSeek's checkpoints lay them out, and the DeepSeek-V3 one stored in
block-FP8 as DeepSeek-V3/R1 are released, measured against its float32 dequantization).

Greedy output is transformers' own greedy output, plain and speculative, alone and batched in
flight; the drafts equal the MTP function computed independently (transformers' own decoder block
loaded from the same keys, the norms and eh_proj read raw, full causal attention recomputed each
step) after one-token and multi-token acceptance; a checkpoint without MTP weights is refused in
one line."""

from __future__ import annotations

import json

import pytest
import torch

from tests.runtime.conftest import TINY_PROMPTS, assert_in_flight_equals_plain

PROMPT = list(range(10, 30))
ARCHITECTURES = ["deepseek_v3", "glm4_moe"]


@pytest.fixture(scope="module")
def mtp_checkpoint(tmp_path_factory, tiny_deepseek_mtp):
    from trtspec.testing.tiny import make_tiny_causal_lm

    made = {"deepseek_v3": tiny_deepseek_mtp}

    def make(model_type: str):
        if model_type not in made:
            made[model_type] = make_tiny_causal_lm(tmp_path_factory.mktemp(model_type), model_type, mtp=True)
        return made[model_type]

    return make


@pytest.fixture(scope="module", params=ARCHITECTURES + ["deepseek_v3-block-fp8"])
def mtp_engine(request, mtp_checkpoint, tmp_path_factory):
    """The engine in mode mtp; `.reference`: the checkpoint transformers and Reference read (for
    block-FP8, DeepSeek's released layout at 16 x 16 blocks so the tiny weights have many, its
    reference float32 dequantization: tests/runtime/checkpoints/test_rt_block_fp8.py)."""
    from trtspec.runtime import Engine

    path = reference = mtp_checkpoint(request.param.removesuffix("-block-fp8"))
    if request.param.endswith("-block-fp8"):
        from tests.runtime.checkpoints.test_rt_block_fp8 import write_reference
        from trtspec.testing.tiny import write_block_fp8

        where = tmp_path_factory.mktemp("block-fp8")
        path = write_block_fp8(reference, where / "fp8", block=(16, 16))
        reference = write_reference(path, where / "reference")
    # a schedule that always drafts: the random module's drafts are rarely accepted, and the cost
    # model would stop drafting
    engine = Engine.from_checkpoints(path, mode="mtp", max_draft_len=3, draft_len_schedule=[[1, 3]])
    engine.path, engine.reference = path, reference
    yield engine
    engine.close()


class Reference:
    """The MTP function computed without trtspec: transformers' decoder block of the checkpoint
    loaded one layer deeper (model.layers.{N} is then an ordinary layer to it), enorm, hnorm,
    eh_proj and shared_head.norm read raw from the safetensors, full causal attention each step."""

    def __init__(self, path):
        from safetensors import safe_open
        from transformers import AutoModelForCausalLM

        layers = json.loads((path / "config.json").read_text())["num_hidden_layers"]
        self.target = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        deeper = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32,
                                                      num_hidden_layers=layers + 1).eval()
        self.block = deeper.model.layers[layers]
        with safe_open(str(path / "model.safetensors"), framework="pt") as tensors:
            raw = {name: tensors.get_tensor(f"model.layers.{layers}.{name}.weight")
                   for name in ("enorm", "hnorm", "eh_proj", "shared_head.norm")}
        config = self.target.config
        self.norms = {}
        for name in ("enorm", "hnorm", "shared_head.norm"):
            norm = type(self.target.model.norm)(config.hidden_size, eps=config.rms_norm_eps)
            norm.weight.data.copy_(raw[name])
            self.norms[name] = norm
        self.eh_proj = raw["eh_proj"]

    @torch.no_grad()
    def chain(self, tokens: list[int], steps: int, logits: list | None = None) -> list[int]:
        """The module's greedy chain after `tokens` (the last one the target's pending token);
        each step's logits appended to `logits` when given."""
        model = self.target.model
        hidden = model(torch.tensor([tokens[:-1]])).last_hidden_state  # H_0..H_{L-2}, after the final norm
        inputs, drafted = list(tokens[1:]), []
        for _ in range(steps):
            embeds = model.embed_tokens(torch.tensor([inputs]))
            # the embedding first, as the released checkpoints' code concatenates them
            x = torch.cat([self.norms["enorm"](embeds), self.norms["hnorm"](hidden)], dim=-1) @ self.eh_proj.T
            positions = torch.arange(len(inputs))[None]
            out = self.block(x, attention_mask=None, position_ids=positions,
                             position_embeddings=model.rotary_emb(x, positions))
            h = self.norms["shared_head.norm"](out[0] if isinstance(out, tuple) else out)
            row = self.target.lm_head(h[0, -1])
            if logits is not None:
                logits.append(row)
            token = int(row.argmax())
            drafted.append(token)
            inputs.append(token)
            hidden = torch.cat([hidden, h[:, -1:]], dim=1)  # the chain feeds the module's own h back
        return drafted


def _record_proposals(engine, prompt, max_new_tokens, replace=None):
    recorded, original = [], engine.drafter.propose_batch

    def spy(sessions, tokens, max_lens):
        drafts = original(sessions, tokens, max_lens)
        recorded.extend((list(seq), draft.token_ids.tolist()) for seq, draft in zip(tokens, drafts, strict=True))
        return drafts if replace is None else [replace(seq, k) for seq, k in zip(tokens, max_lens, strict=True)]

    engine.drafter.propose_batch = spy
    try:
        return engine.generate(prompt, max_new_tokens=max_new_tokens), recorded
    finally:
        del engine.drafter.propose_batch


def test_plain_and_mtp_greedy_equal_transformers_greedy(mtp_engine):
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(mtp_engine.reference), dtype=torch.float32).eval()
    expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=20, min_new_tokens=20,
                                  do_sample=False)[0, len(PROMPT):].tolist()
    assert mtp_engine.generate(PROMPT, max_new_tokens=20, speculative=False).token_ids == expected
    spec = mtp_engine.generate(PROMPT, max_new_tokens=20)
    assert spec.token_ids == expected
    assert spec.stats.num_drafts > 0 and spec.stats.num_draft_tokens > spec.stats.num_drafts


def test_drafts_equal_the_mtp_function_after_one_and_many_accepted_tokens(mtp_engine):
    from trtspec.runtime.drafters.base import Draft

    reference = Reference(mtp_engine.reference)
    forwards, forward = [], mtp_engine.drafter.forward
    mtp_engine.drafter.forward = lambda feeds: forwards.append(forward(feeds)) or forwards[-1]
    try:
        _, recorded = _record_proposals(mtp_engine, PROMPT, 12)
    finally:
        del mtp_engine.drafter.forward
    assert len(recorded) >= 4
    for tokens, draft in recorded[:4]:
        assert draft == reference.chain(tokens, len(draft))
    # the numbers themselves, not only their argmax: the first proposal's three forwards (the
    # prompt's catch-up, then one chain position each) give the function's logits
    expected: list = []
    reference.chain(recorded[0][0], 3, expected)
    for (logits, _), want in zip((f[0] for f in forwards[:3]), expected, strict=True):
        torch.testing.assert_close(logits[-1], want, atol=2e-4, rtol=0)
    # oracle drafts (the target's own continuation): 3 tokens accepted a step, so the module
    # catches up on several verified rows at once; its own drafts, made before the oracle's
    # replace them, still equal the function
    truth = PROMPT + mtp_engine.generate(PROMPT, max_new_tokens=30, speculative=False).token_ids
    result, recorded = _record_proposals(mtp_engine, PROMPT, 16,
                                         replace=lambda tokens, k: Draft(torch.tensor(truth[len(tokens):len(tokens) + k])))
    assert result.stats.acceptance_rate == 1.0
    for tokens, draft in recorded[1:4]:
        assert draft == reference.chain(tokens, len(draft))


def test_batched_in_flight_equals_plain(mtp_engine):
    """Six requests from threads share steps; each answer is its plain greedy answer."""
    prompts = [TINY_PROMPTS[i % len(TINY_PROMPTS)] + [i] for i in range(6)]
    results = assert_in_flight_equals_plain(mtp_engine, prompts, 12)
    assert sum(r.stats.num_drafts for r in results) > 0


def test_a_checkpoint_without_mtp_weights_is_refused_in_one_line(tmp_path, mtp_checkpoint):
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.runtime import Engine
    from trtspec.testing.tiny import make_tiny_causal_lm

    # DeepseekV3Config writes num_nextn_predict_layers 1 by default, with no weights behind it
    bare = make_tiny_causal_lm(tmp_path / "bare", "deepseek_v3")
    assert json.loads((bare / "config.json").read_text())["num_nextn_predict_layers"] == 1
    with pytest.raises(IncompatibleArtifactError) as refused:
        Engine.from_checkpoints(bare, mode="mtp")
    assert "needs the checkpoint's MTP weights" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(IncompatibleArtifactError, match="num_layers 2: the cpu engine drafts with one MTP module"):
        Engine.from_checkpoints(mtp_checkpoint("deepseek_v3"), mode="mtp", mtp_layers=2)


def test_the_reader_takes_only_the_mtp_keys_and_stacks_the_experts(mtp_checkpoint):
    from trtspec.runtime.drafters.mtp import read_mtp_weights, stack_experts

    state = read_mtp_weights(mtp_checkpoint("deepseek_v3"), 4)
    assert {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "shared_head.head.weight",
            "embed_tokens.weight", "mlp.experts.3.up_proj.weight", "self_attn.kv_b_proj.weight"} <= set(state)
    assert state["eh_proj.weight"].shape == (64, 128)
    stacked = stack_experts(state, {"mlp.experts.gate_up_proj"})
    assert stacked["mlp.experts.gate_up_proj"].shape == (4, 64, 64)  # 4 experts, gate and up of 32 rows
    assert torch.equal(stacked["mlp.experts.gate_up_proj"][2, 32:], state["mlp.experts.2.up_proj.weight"])
    assert not any(key.startswith("mlp.experts.0.") for key in stacked)
