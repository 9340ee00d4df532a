"""The `trtspec` command line: a click group whose subcommands load lazily.

Each stage has its own module in this package with one short command function; the group
imports a module only when its command runs, so `trtspec --help` stays instant. The group turns
every exception it can anticipate (TrtSpecError, click's usage errors, errors on the user's
paths; the table is in _errors.py) into `error: ...` lines on stderr and a non-zero exit code;
set TRTSPEC_DEBUG=1 for the traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

import click

from trtspec import __version__
from trtspec.cli._errors import as_cli_error

# command name -> (module, attribute, one-line help shown by `trtspec --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "init": ("trtspec.cli.init_cmd", "init", "Write a commented trtspec.yaml that runs the demo as is."),
    "spec": ("trtspec.cli.spec_cmd", "spec", "Check or show the resolved spec."),
    "models": ("trtspec.cli.models_cmd", "models", "List, fetch and inspect model sources."),
    "convert": ("trtspec.cli.convert_cmd", "convert", "ModelOpt: FP8 PTQ, EAGLE-3 head training, draft pairing."),
    "export-head": ("trtspec.cli.export_head_cmd", "export_head",
                    "Write the EAGLE-3 head for vLLM, SGLang or TensorRT-LLM (eagle|modelopt|speculators)."),
    "build": ("trtspec.cli.build_cmd", "build", "Build engines for the cpu, trtllm or trtllm-engine backend."),
    "plan": ("trtspec.cli.build_cmd", "plan", "GPU memory plan for the spec (weights, KV cache, headroom)."),
    "deploy": ("trtspec.cli.deploy_cmd", "deploy", "Render the Triton model repository and start the server."),
    "infer": ("trtspec.cli.infer_cmd", "infer", "Send one prompt to the server and stream the answer."),
    "generate": ("trtspec.cli.generate_cmd", "generate", "Generate in-process with the cpu engine (no server)."),
    "bench": ("trtspec.cli.bench_cmd", "bench", "Measure latency, throughput and acceptance (vs baseline)."),
    "tune": ("trtspec.cli.tune_cmd", "tune", "Choose max_draft_len by measured tokens/s and record it."),
}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module_name, attribute, _ = COMMANDS[name]
        return getattr(importlib.import_module(module_name), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table, so listing commands imports nothing.
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_text) for name, (_, _, help_text) in COMMANDS.items()])

    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as error:
            # click suggests from self.commands, which a lazy group leaves empty.
            raise click.exceptions.NoSuchCommand(error.command_name, possibilities=list(COMMANDS),
                                                 ctx=ctx) from None

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        # Options of `trtspec` itself (`trtspec --bogus`) are parsed here, outside invoke().
        with _one_line_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context):
        with _one_line_errors():
            return super().invoke(ctx)


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """Re-raise an anticipated exception as a CliError, which click shows as `error: ...` lines."""
    try:
        yield
    except Exception as error:
        cli_error = None if os.environ.get("TRTSPEC_DEBUG") == "1" else as_cli_error(error)
        if cli_error is None or cli_error is error:
            raise
        raise cli_error from None


EPILOG = """\b
The pipeline, on the embedded default (CPU, real Triton, SmolLM2):
  trtspec init                     # writes trtspec.yaml (model smollm2, mode ngram, backend cpu)
  trtspec models fetch smollm2
  trtspec convert                  # checkpoints (FP8, EAGLE-3 head, draft) as the spec asks
  trtspec build                    # engines/<name>/
  trtspec deploy                   # model_repository/ + tritonserver on 127.0.0.1
  trtspec infer "What is the capital of France?"
  trtspec bench --baseline
  trtspec deploy stop

Every command takes -c/--config (default ./trtspec.yaml); its flags override the file.
Set TRTSPEC_DEBUG=1 to see tracebacks.
"""


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trtspec")
def main() -> None:
    """trtspec: a Hugging Face LLM to a speculative-decoding service on Triton + TensorRT-LLM."""
