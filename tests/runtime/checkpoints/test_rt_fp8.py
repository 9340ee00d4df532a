"""FP8: ModelOpt PTQ + export_hf_checkpoint of a tiny model, loaded by dequantizing at load."""

from __future__ import annotations

import pytest
import torch

PROBE = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 100, 200]])


@pytest.fixture(scope="module")
def fp8_export(tiny_llama, tmp_path_factory):
    """(logits of the fake-quantized ModelOpt model on PROBE, its FP8 HF export directory).

    The logits are taken before exporting: export_hf_checkpoint packs the weights in place."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()

    def calibrate(m):
        for seed in range(4):
            m(torch.randint(0, 512, (1, 32), generator=torch.Generator().manual_seed(seed)))

    mtq.quantize(model, mtq.FP8_DEFAULT_CFG, calibrate)
    with torch.no_grad():
        reference = model(PROBE).logits
    out = tmp_path_factory.mktemp("fp8")
    export_hf_checkpoint(model, export_dir=out)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(out)
    return reference, out


def test_export_really_is_fp8(fp8_export):
    from safetensors import safe_open

    _, out = fp8_export
    assert (out / "hf_quant_config.json").is_file()
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys() if k.endswith("proj.weight")}
    assert dtypes == {torch.float8_e4m3fn}


def test_fp8_logits_match_the_fake_quantized_model(fp8_export, tiny_llama):
    from transformers import AutoModelForCausalLM

    from trtspec.runtime.checkpoints.parts import load_causal_lm

    reference, out = fp8_export
    served = load_causal_lm(out)
    with torch.no_grad():
        got = served(PROBE).logits
        unquantized = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)(PROBE).logits
    assert (got - reference).abs().max() < 1e-4
    # the FP8 numerics are really there: far from the float32 model
    assert (unquantized - reference).abs().max() > 1e-2
    assert all(p.dtype == torch.float32 for p in served.parameters())


def test_engine_runs_an_fp8_target_losslessly(fp8_export):
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(fp8_export[1], mode="ngram", max_draft_len=4)
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    spec = engine.generate(prompt, max_new_tokens=24)
    assert spec.token_ids == engine.generate(prompt, max_new_tokens=24, speculative=False).token_ids
