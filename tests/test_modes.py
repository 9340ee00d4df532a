"""The mode table (trtspec.modes) is what the schema, the CLI and the README say."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from trtspec import modes


def test_readme_carries_the_mode_table():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert modes.markdown_table() in readme, "README.md's mode x backend table: paste modes.markdown_table()"


def test_the_schema_and_the_cli_take_the_table_s_modes():
    from trtspec.cli._options import mode_option
    from trtspec.spec import schema

    assert get_args(schema.Mode) == modes.NAMES
    assert schema.BACKEND_MODES["cpu"] == modes.NAMES  # the cpu engine runs every mode
    assert schema.TREE_MODES == ("eagle3", "draft-target")

    @mode_option
    def command(mode):
        return mode

    assert tuple(command.__click_params__[0].type.choices) == modes.NAMES


def test_every_refusal_has_a_reason_and_a_fix_and_every_drafter_resolves():
    import importlib

    for name, row in modes.MODES.items():
        assert set(row.backends) == set(modes.BACKENDS), name
        for backend, backing in row.backends.items():
            if not backing.runs:
                assert backing.reason and backing.fix, (name, backend)
        if row.drafter:
            module, _, function = row.drafter.partition(":")
            assert callable(getattr(importlib.import_module(module), function)), row.drafter


def test_init_comments_every_mode_whichever_it_writes(in_tmp):
    from click.testing import CliRunner

    from trtspec.cli import main
    from trtspec.spec.loading import load_spec

    for name in modes.NAMES:
        draft = ["--draft", "smollm2"] if name == "draft-target" else []  # the one mode that needs a source
        result = CliRunner().invoke(main, ["init", "--mode", name, *draft, "-o", f"{name}.yaml"])
        assert result.exit_code == 0, result.output
        text = (in_tmp / f"{name}.yaml").read_text()
        assert load_spec(in_tmp / f"{name}.yaml").speculative.mode == name
        assert all(f"#   {row}" in text for row in modes.comment_rows()), name


def test_the_modes_each_release_runs_on_its_tensorrt_backend_only_are_refused_on_the_llm_api():
    """The contract's llm_api.tensorrt_backend_only (supports_backend refuses pytorch, read at each
    release) is what the mode table refuses on the LLM-API backend and serves on trtllm-engine."""
    from trtspec.builders import contracts

    for version in ("1.1.0", "1.2.1"):
        only = contracts.load(version).llm_api["tensorrt_backend_only"]
        named = {mode for mode in only if isinstance(only[mode], dict)}
        assert named == {"medusa", "lookahead"}, version
        for mode in named:
            assert modes.refusal("trtllm", mode) is not None and modes.refusal("trtllm-engine", mode) is None
