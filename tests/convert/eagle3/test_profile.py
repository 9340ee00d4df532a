"""speculation_profile.json: ModelOpt's acceptance fields computed exactly from the engine's
counters, written beside every head convert makes, and the cpu engine's acceptance cross-checked
against two independent implementations of EAGLE-3 draft-and-verify on the same head and prompts:
a plain-PyTorch one written here (transformers' Llama for the target, the head's tensors in
hand-written torch ops) and ModelOpt's own `pseudo_speculative_generate` on the warm-started module.
The reference is not a copy of the engine: written first with transformers' `hidden_states[i + 1]`
for the auxiliary layers, it disagreed (14 full acceptances in 134 drafts against the engine's 12 in
141), because the tiny head reads the last layer, whose `hidden_states` entry is the final norm's
output; with the layers' own outputs (forward hooks, as ModelOpt captures them) it agrees exactly.
"""

from __future__ import annotations

import json

import pytest

from tests.convert.conftest import EVAL_PROMPTS, manifest

CROSS_PROMPTS = ["What is the capital of France?", "def add(a, b):", "the quick brown fox",
                 "1 2 3 4 5 6", "speculative decoding drafts tokens", "Paris is the capital of"]


def stats(*accepted_counts, k=4):
    """GenerationStats of one request whose drafts of k tokens had these accepted counts."""
    from trtspec.runtime.loop.stats import GenerationStats

    result = GenerationStats()
    for accepted in accepted_counts:
        result.record_draft(k, accepted)
    result.num_output_tokens = sum(a + 1 for a in accepted_counts)
    return result


def test_modelopt_fields_come_exactly_from_the_per_position_counts():
    from trtspec.convert.eagle3.profile import shape_figures

    # request 0: drafts accepting 0, 2 and 4 tokens; request 1: one accepting 1
    figures = shape_figures([stats(0, 2, 4), stats(1)], plain_seconds=2.0, plain_tokens=10, seconds=1.0,
                            max_draft_len=4)
    assert figures["drafts"] == 4 and figures["accepted_per_position"] == [3, 2, 1, 1]
    # steps by tokens produced (accepted + 1): one each of 1, 2, 3 and 5, none of 4
    assert figures["Acceptance_Length_Histogram"] == {"1": 1, "2": 1, "3": 1, "4": 0, "5": 1}
    assert figures["Joint_Acceptance_Rate"] == {"1": 1.0, "2": 0.75, "3": 0.5, "4": 0.25, "5": 0.25}
    assert figures["Conditional_Acceptance_Rate"] == {"1": 1.0, "2": 0.75, "3": 0.6667, "4": 0.5, "5": 1.0}
    assert figures["acceptance_per_position"] == [0.75, 0.5, 0.25, 0.25]
    # trtspec's mean over all drafts (1 + 7 / 4) and ModelOpt's mean of per-request means
    assert figures["mean_acceptance_length"] == 2.75
    assert figures["Request_AL"] == {"0": 3.0, "1": 2.0} and figures["Average_AL"] == 2.5
    assert figures["speed"] == {"concurrency": 1, "speculative_tokens_per_s": 11.0, "plain_tokens_per_s": 5.0,
                                "speedup": 2.2}
    assert figures["Output TPS"] == 11.0


@pytest.mark.slow
def test_convert_writes_the_profile_beside_the_head(eagle3_run):
    from trtspec.convert.eagle3.profile import PROFILE_FILE, as_acceptance, read_profile

    head = eagle3_run[0] / "work" / "checkpoints" / "eagle3"
    assert (head / PROFILE_FILE).is_file()
    profile = read_profile(head)
    assert profile["head"]["made_by"] == "trained"
    assert profile["target_sha256"] == manifest(head)["target_sha256"]
    assert profile["prompts"]["count"] == len(EVAL_PROMPTS) and profile["max_draft_len"] == 4
    chain = profile["shapes"][0]
    assert chain["draft"] == "chain of 4"
    assert sum(chain["Acceptance_Length_Histogram"].values()) == chain["drafts"]
    assert chain["Joint_Acceptance_Rate"]["2"] == chain["acceptance_per_position"][0]
    assert chain["speed"]["plain_tokens_per_s"] > 0 and profile["machine"]["cpu"]
    # the manifest's acceptance report is the profile's chain
    assert as_acceptance(profile) == manifest(head)["report"]["acceptance"]


@pytest.mark.slow
def test_profile_measures_every_tree_shape_the_spec_builds(eagle3_run, tiny_llama):
    from trtspec.convert.eagle3.profile import draft_shapes, measure_profile, summary_lines
    from trtspec.spec.schema import SpeculativeSpec

    speculative = SpeculativeSpec(mode="eagle3", max_draft_len=4, eagle_choices=[[0], [1], [0, 0], [0, 0, 0]])
    shapes = draft_shapes(speculative)
    assert [s["draft"] for s in shapes] == ["chain of 4", "static tree of 4 nodes (eagle_choices)"]
    dynamic = draft_shapes(SpeculativeSpec(mode="eagle3", tree={"topk": 2, "depth": 3, "num_draft_tokens": 4}))
    head = eagle3_run[0] / "work" / "checkpoints" / "eagle3"
    profile = measure_profile(tiny_llama, head, CROSS_PROMPTS[:2], max_draft_len=4, new_tokens=12,
                              shapes=shapes + dynamic[1:], timed=False)
    assert [s["draft"] for s in profile["shapes"]][1:] == ["static tree of 4 nodes (eagle_choices)",
                                                          "dynamic tree topk 2 depth 3 nodes 4"]
    for shape in profile["shapes"]:
        assert shape["drafts"] > 0 and 1.0 <= shape["mean_acceptance_length"] <= 5.0
        assert sum(shape["Acceptance_Length_Histogram"].values()) == shape["drafts"]
    assert len(summary_lines(profile)) == 3
    # the chain's acceptance by prompt length (trtspec.bench.context_buckets): every request in a bucket
    buckets = profile["shapes"][0]["by_context_length"]
    assert sum(b["requests"] for b in buckets) == 2 and all(b["mean_acceptance_length"] >= 1.0 for b in buckets)


# --- the independent reference: EAGLE-3 draft-and-verify in plain PyTorch -------------------------

def reference_acceptance(target_dir, head_dir, prompts, *, max_draft_len, new_tokens):
    """Greedy EAGLE-3 speculative decoding without a cache: every step re-runs transformers' Llama
    over the whole sequence and the head (ModelOpt's math: cat(input_layernorm(embeddings),
    hidden_norm(input_layernorm(h))) into one Llama layer, residual h) over every EAGLE position."""
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.chat import prompt_ids

    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    config = json.loads((head_dir / "config.json").read_text())
    w = load_file(str(head_dir / "model.safetensors"))
    layers = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    heads, kv_heads, eps = config["num_attention_heads"], config["num_key_value_heads"], config["rms_norm_eps"]
    dim = config["head_dim"]
    theta = config.get("rope_theta") or config["rope_scaling"]["rope_theta"]
    to_target = (lambda i: i + int(w["d2t"][i])) if "d2t" in w else (lambda i: i)

    def rms(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rope(x):  # [heads, T, dim], positions 0..T-1, half-split rotation
        inv = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
        angles = torch.arange(x.shape[1]).float()[:, None] * inv[None]
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
        return x * cos + torch.cat([-x[..., dim // 2:], x[..., :dim // 2]], -1) * sin

    def head(embeds, hidden):  # [T, H], [T, H] -> draft logits [T, draft vocab], pre-norm h [T, H]
        p, length = "layers.0.", embeds.shape[0]
        x = torch.cat([rms(embeds, w[p + "input_layernorm.weight"]),
                       rms(rms(hidden, w[p + "input_layernorm.weight"]), w[p + "hidden_norm.weight"])], -1)
        q = rope((x @ w[p + "self_attn.q_proj.weight"].T).view(length, heads, dim).transpose(0, 1))
        k = rope((x @ w[p + "self_attn.k_proj.weight"].T).view(length, kv_heads, dim).transpose(0, 1))
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(length, kv_heads, dim).transpose(0, 1)
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
        scores = q @ k.transpose(1, 2) / dim ** 0.5
        scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
        attention = (scores.softmax(-1) @ v).transpose(0, 1).reshape(length, heads * dim)
        h = hidden + attention @ w[p + "self_attn.o_proj.weight"].T
        m = rms(h, w[p + "post_attention_layernorm.weight"])
        h = h + (F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) @ \
            w[p + "mlp.down_proj.weight"].T
        return rms(h, w["norm.weight"]) @ w["lm_head.weight"].T, h

    # the decoder layers' own outputs (hidden_states[-1] would be the final norm's output instead)
    outputs = {}
    for index in layers:
        target.model.layers[index].register_forward_hook(
            lambda module, args, out, index=index: outputs.__setitem__(index, out[0] if isinstance(out, tuple) else out))
    embed = target.get_input_embeddings()
    drafts, accepted_per_position = 0, [0] * max_draft_len
    with torch.no_grad():
        for prompt in prompts:
            sequence = prompt_ids(tokenizer, prompt)
            sequence.append(int(target(torch.tensor([sequence])).logits[0, -1].argmax()))  # prefill: first token
            produced = 1
            while produced < new_tokens and sequence[-1] != tokenizer.eos_token_id:
                # 1. draft: EAGLE position j reads the target's layers at token j and the embedding of j + 1
                outputs.clear()
                target(torch.tensor([sequence]))
                aux = torch.cat([outputs[i][0, :-1] for i in layers], -1)
                hidden = aux @ w["fc.weight"].T
                tokens, proposal = list(sequence[1:]), []
                for _ in range(max_draft_len):
                    logits, h = head(embed(torch.tensor(tokens)), hidden)
                    proposal.append(to_target(int(logits[-1].argmax())))
                    tokens.append(proposal[-1])
                    hidden = torch.cat([hidden, h[-1:]])
                # 2. verify: the target's greedy tokens over the sequence and the draft
                greedy = target(torch.tensor([sequence + proposal])).logits[0, len(sequence) - 1:].argmax(-1).tolist()
                # 3. accept the longest matching prefix, then the bonus token
                accepted = 0
                while accepted < max_draft_len and proposal[accepted] == greedy[accepted]:
                    accepted_per_position[accepted] += 1
                    accepted += 1
                drafts += 1
                committed = proposal[:accepted] + [greedy[accepted]]
                if tokenizer.eos_token_id in committed:
                    committed = committed[:committed.index(tokenizer.eos_token_id) + 1]
                sequence += committed
                produced += accepted + 1
    return {"drafts": drafts, "mean_acceptance_length": 1 + sum(accepted_per_position) / drafts,
            "accepted_per_position": accepted_per_position}


@pytest.mark.slow
def test_engine_acceptance_equals_a_plain_pytorch_reference_and_modelopts_own(eagle3_run, tiny_llama, tmp_path):
    from trtspec.convert import reports
    from trtspec.convert.eagle3 import profile, warm_start

    head = eagle3_run[0] / "work" / "checkpoints" / "eagle3"
    engine = profile.measure_profile(tiny_llama, head, CROSS_PROMPTS, max_draft_len=4, new_tokens=32,
                                     timed=False)["shapes"][0]
    reference = reference_acceptance(tiny_llama, head, CROSS_PROMPTS, max_draft_len=4, new_tokens=32)
    # ModelOpt's HF-side drafting on its own module, warm-started with the same head
    from tests.convert.eagle3.test_warm_start import converted

    model = converted(tiny_llama, head)
    warm_start.warm_start(model, head)
    from trtspec.convert.target import load_causal_lm

    plain, tokenizer = load_causal_lm(tiny_llama, dtype="float32")
    continuations = reports.greedy_continuations(plain, tokenizer, CROSS_PROMPTS, 32)
    modelopt = reports.eagle3_acceptance(model, continuations, max_draft_len=4)
    print(json.dumps({"engine": [engine["mean_acceptance_length"], engine["accepted_per_position"], engine["drafts"]],
                      "reference": reference, "modelopt": [modelopt["mean_acceptance_length"],
                                                           modelopt["accepted_per_position"], modelopt["steps"]]}))
    assert engine["drafts"] > 20 and engine["mean_acceptance_length"] > 1.2  # a head that accepts something
    # greedy and float32 on both sides: the same drafts accepted, up to a near-tie flipping an argmax
    assert abs(engine["mean_acceptance_length"] - reference["mean_acceptance_length"]) <= 0.05
    assert abs(engine["drafts"] - reference["drafts"]) <= 1
    assert all(abs(a - b) <= 1 for a, b in zip(engine["accepted_per_position"], reference["accepted_per_position"],
                                               strict=True))
    # ModelOpt counts to the end of the continuation instead of the request's max tokens
    assert abs(engine["mean_acceptance_length"] - modelopt["mean_acceptance_length"]) <= 0.1


@pytest.mark.slow
def test_bench_shows_the_profile_of_the_head_it_runs(eagle3_run, tmp_path):
    import yaml
    from click.testing import CliRunner

    from trtspec.cli import main

    _, spec_path, _ = eagle3_run
    settings = yaml.safe_load(spec_path.read_text())
    settings["build"] = {"output_dir": str(tmp_path / "engines")}
    spec = tmp_path / "trtspec.yaml"
    spec.write_text(yaml.safe_dump(settings))
    built = CliRunner().invoke(main, ["build", "-c", str(spec)])
    assert built.exit_code == 0, built.output
    engine = next((tmp_path / "engines").iterdir())
    result = CliRunner().invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--num-prompts", "2",
                                       "--concurrency", "1", "--max-tokens", "8", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    shown_text = " ".join(result.output.split())  # however the terminal wrapped it
    assert "head profile (2 prompts x 8 tokens" in shown_text and "chain of 4: mean acceptance length" in shown_text
    shown = json.loads((tmp_path / "out" / "bench.json").read_text())["metadata"]["head_profile"]
    assert shown == json.loads((engine / "draft" / "speculation_profile.json").read_text())


@pytest.mark.slow
def test_an_imported_head_gets_its_profile_too_and_it_equals_the_source_heads(eagle3_run, tiny_llama,
                                                                                eval_prompts_file, tmp_path):
    import shutil

    from tests.convert.conftest import run_cli, write_spec
    from trtspec.convert.eagle3.profile import read_profile

    source = tmp_path / "source-head"
    shutil.copytree(eagle3_run[0] / "work" / "checkpoints" / "eagle3", source)
    spec = write_spec(tmp_path, tiny_llama, speculative={"mode": "eagle3", "eagle3": {"head": str(source)}},
                      build={"max_seq_len": 1024, "max_input_len": 512})
    result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "8")
    assert result.exit_code == 0, result.output
    imported = read_profile(tmp_path / "work" / "checkpoints" / "eagle3")
    assert imported["head"]["made_by"] == "imported"
    # the same tensors and function on the same prompts: the same acceptance, draft by draft
    ours, theirs = imported["shapes"][0], read_profile(source)["shapes"][0]
    for field in ("drafts", "accepted_per_position", "Acceptance_Length_Histogram", "Request_AL"):
        assert ours[field] == theirs[field], field
    assert manifest(tmp_path / "work" / "checkpoints" / "eagle3")["report"]["acceptance"]["steps"] == ours["drafts"]
