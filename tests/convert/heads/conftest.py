"""An 8-layer tiny target, one trained head written as each tool writes it, imports of each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.convert.heads import tool_layouts


@pytest.fixture(scope="session")
def target8(tmp_path_factory) -> Path:
    """A seeded 8-layer tiny Llama: deep enough for every tool's default layers (1, 3, 4 = inputs 2, 4, 5)."""
    from trtspec.testing.tiny import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("target8"), seed=5, num_hidden_layers=8,
                           max_position_embeddings=4096)


@pytest.fixture(scope="session")
def target_model(target8):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(target8, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def modelopt_head(target8, tmp_path_factory):
    """(ModelOpt model, its export dir): the trained head in ModelOpt >= 0.43's own layout."""
    from tests.convert.conftest import one_thread

    with one_thread():
        return tool_layouts.trained_modelopt_head(target8, tmp_path_factory.mktemp("modelopt") / "head")


@pytest.fixture(scope="session")
def tool_heads(modelopt_head, target_model, tmp_path_factory) -> dict[str, Path]:
    """layout name -> the head as that tool writes it."""
    root = tmp_path_factory.mktemp("tool-heads")
    source = modelopt_head[1]
    embed = target_model.get_input_embeddings().weight.detach()
    return {
        "eagle": tool_layouts.write_eagle_authors(source, root / "eagle"),
        "specforge": tool_layouts.write_specforge(source, root / "specforge", embed),
        "modelopt-0.42": tool_layouts.write_modelopt_042(source, root / "modelopt-0.42"),
        "modelopt": source,
        "speculators": tool_layouts.write_speculators(source, root / "speculators", norm_before_residual=True,
                                                      layer_ids=[2, 4, 5]),
    }


def import_into(directory: Path, source: Path | str, target: Path, **options) -> dict:
    """The canonical head of `source` written into `directory`; the import's report."""
    from trtspec.convert.eagle3.heads.stage import write_imported

    directory.mkdir(parents=True, exist_ok=True)
    return write_imported(directory, str(source), target, max_seq_len=options.pop("max_seq_len", 2048), **options)


@pytest.fixture(scope="session")
def imported(tool_heads, target8, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """layout name -> (its canonical import, the import's report)."""
    root = tmp_path_factory.mktemp("imported")
    return {name: (root / name, import_into(root / name, path, target8)) for name, path in tool_heads.items()}


@pytest.fixture(autouse=True)
def _one_linear_kernel(monkeypatch):
    """Every engine here runs its linear layers on the row kernel: otherwise each load picks each
    layer's kernel by timing, and two loads of one head may round (so draft) differently."""
    monkeypatch.setenv("TRTSPEC_CPU_LINEAR", "rowdot")
