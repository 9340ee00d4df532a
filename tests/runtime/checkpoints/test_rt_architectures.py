"""The architectures the cpu engine runs compute transformers' own greedy tokens; the ones it cannot
run are refused in one line by `trtspec spec check`, `trtspec build` and the loader, before any work.

Each runnable architecture is a tiny seeded checkpoint (trtspec.testing.tiny.TINY_ARCHITECTURES);
the list in trtspec.runtime.checkpoints.architectures.RUNS is exactly what this file proves."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from trtspec.runtime.checkpoints.architectures import RUNS, why_not_runnable

PROMPT = list(range(10, 30))
TOKENS = 16


@pytest.fixture(scope="module")
def tiny_of(tmp_path_factory):
    from trtspec.testing.tiny import make_tiny_causal_lm

    made = {}

    def make(model_type: str, **overrides):
        key = (model_type, tuple(sorted(overrides.items())))
        if key not in made:
            made[key] = make_tiny_causal_lm(tmp_path_factory.mktemp(model_type), model_type, **overrides)
        return made[key]

    return make


def _spec(tmp_path, source, **build) -> str:
    extra = "".join(f"  {key}: {value}\n" for key, value in build.items())
    path = tmp_path / "trtspec.yaml"
    path.write_text(f"model:\n  source: {source}\n  name: tiny\nspeculative:\n  mode: none\n"
                    f"build:\n  backend: cpu\n  output_dir: {tmp_path / 'engines'}\n{extra}workdir: {tmp_path / 'work'}\n")
    return str(path)


@pytest.mark.parametrize("model_type", sorted(RUNS))
def test_each_architecture_it_runs_gives_transformers_greedy_tokens(model_type, tiny_of):
    import torch
    from transformers import AutoModelForCausalLM

    from trtspec.runtime import Engine

    path = tiny_of(model_type)
    reference = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=TOKENS, min_new_tokens=TOKENS,
                                  do_sample=False)[0, len(PROMPT):].tolist()
    with Engine.from_checkpoints(path, mode="ngram", max_draft_len=3) as engine:
        assert engine.generate(PROMPT, max_new_tokens=TOKENS, speculative=False).token_ids == expected
        assert engine.generate(PROMPT, max_new_tokens=TOKENS).token_ids == expected


def test_an_architecture_it_cannot_run_is_refused_in_one_line_by_spec_check_build_and_the_loader(tmp_path, tiny_of):
    from trtspec.cli import main
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.runtime.checkpoints.parts import load_causal_lm

    # Gemma 2-style soft-capped attention scores: the paged attention does not cap them
    path = tiny_of("gemma3_text", attn_logit_softcapping=50.0)
    config = _spec(tmp_path, path)
    checked = CliRunner().invoke(main, ["spec", "check", "-c", config])
    assert checked.exit_code != 0
    assert checked.output.strip().count("\n") == 0 and "caps attention scores" in checked.output
    assert "Llama, Mistral, Qwen2, Qwen3" in checked.output and "DeepSeek-V3, GLM-4.5" in checked.output
    start = time.monotonic()
    built = CliRunner().invoke(main, ["build", "-c", config])
    assert built.exit_code != 0 and time.monotonic() - start < 30
    assert built.output.strip().count("\n") == 0, built.output
    assert "Gemma3ForCausalLM caps attention scores" in built.output and "Traceback" not in built.output
    assert not (tmp_path / "engines").exists() or not list((tmp_path / "engines").iterdir())
    with pytest.raises(IncompatibleArtifactError, match="caps attention scores"):
        load_causal_lm(path)


def test_a_sliding_window_below_max_seq_len_is_refused_with_the_length_that_runs(tmp_path, tiny_of):
    from trtspec.cli import main

    path = tiny_of("mistral", sliding_window=128)
    checked = CliRunner().invoke(main, ["spec", "check", "-c", _spec(tmp_path, path, max_seq_len=512, max_input_len=256)])
    assert checked.exit_code != 0 and "sliding window of 128 tokens" in checked.output
    assert "set build.max_seq_len to at most 128" in checked.output
    fits = CliRunner().invoke(main, ["spec", "check", "-c", _spec(tmp_path, path, max_seq_len=128,
                                                                  max_input_len=64)])
    assert fits.exit_code == 0, fits.output


def test_what_is_refused_and_why():
    assert why_not_runnable({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}) is None
    # multi-head latent attention runs (keys and values of different head sizes in the paged pool)
    assert why_not_runnable({"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                             "v_head_dim": 128}) is None
    assert "not an architecture the cpu engine runs" in why_not_runnable({"model_type": "deepseek_v32"})
    assert "not an architecture the cpu engine runs" in why_not_runnable({"model_type": "gpt_bigcode"})
    assert "caps attention scores" in why_not_runnable({"model_type": "gemma3_text", "attn_logit_softcapping": 50.0})
    # Qwen's sliding window is off unless use_sliding_window is set
    assert why_not_runnable({"model_type": "qwen2", "sliding_window": 64}, 2048) is None
    assert "sliding window" in why_not_runnable({"model_type": "qwen2", "sliding_window": 64,
                                                 "use_sliding_window": True}, 2048)


@pytest.mark.slow
def test_generate_on_a_tiny_qwen3_prints_only_its_statistics_on_stderr(tmp_path, tiny_of):
    from trtspec.cli import main

    config = _spec(tmp_path, tiny_of("qwen3"))
    built = CliRunner().invoke(main, ["build", "-c", config])
    assert built.exit_code == 0, built.output
    run = subprocess.run([sys.executable, "-m", "trtspec", "generate", "-c", config, "Hello", "--max-tokens", "8"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    # the contention lines appear only while other processes compute on the engine's cores
    # (tests/runtime/cores/test_rt_contention.py); nothing else but the statistics
    # and generate's warm-up line, its one-time costs reported apart (issue 71)
    others = [line for line in lines if not line.startswith(("[none] 8 tokens in ", "[warm-up] "))
              and "other processes compute on" not in line and "of its 2 threads' cores" not in line
              and "cores are free again" not in line]
    assert others == [], run.stderr
    assert lines and lines[-1].startswith("[none] 8 tokens in ")
