"""`trtspec generate`: run the cpu engine in-process on one prompt (no server)."""

from __future__ import annotations

import sys
import time

import click

from trtspec.cli._options import config_option, emit_json, json_option, request_options

EPILOG = """\b
Examples:
  trtspec generate --engine engines/smollm2-ngram-cpu "What is the capital of France?"
  trtspec generate "Summarize: ..." --max-tokens 128            # engine named by ./trtspec.yaml
  trtspec generate --engine DIR "Tell me a story" --temperature 0.8 --top-p 0.95 --seed 1
  trtspec generate --engine DIR "Hi" --no-spec --json            # baseline, machine-readable
"""


@click.command(epilog=EPILOG)
@click.argument("prompt")
@click.option("--engine", "engine_dir", type=click.Path(file_okay=False), default=None,
              help="Engine directory (engine.json); default: the engine the spec builds with --backend cpu.")
@request_options(max_tokens=128, temperature=0.0)
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--no-spec", is_flag=True, help="Decode without speculation (the baseline).")
@click.option("--raw", is_flag=True, help="Do not apply the chat template to the prompt.")
@config_option
@json_option
def generate(prompt: str, engine_dir: str | None, max_tokens: int, temperature: float, top_p: float | None,
             top_k: int | None,
             seed: int | None, stop: tuple[str, ...], no_spec: bool, raw: bool, config_path: str | None,
             as_json: bool) -> None:
    """Generate text with the cpu engine, streaming it to stdout; statistics go to stderr."""
    from trtspec.runtime import load_engine

    if engine_dir is None:
        engine_dir = _engine_from_spec(config_path)
    engine = load_engine(engine_dir)
    kwargs = {"max_new_tokens": max_tokens, "temperature": temperature,
              "top_k": 0 if top_k is None else top_k, "top_p": 1.0 if top_p is None else top_p,
              "seed": seed, "speculative": not no_spec, "stop": list(stop) or None,
              "chat": False if raw else None}
    started = time.perf_counter()
    if as_json:
        result = engine.generate(prompt, **kwargs)
        seconds = time.perf_counter() - started
        emit_json({"text": result.text, "token_ids": result.token_ids, "finish_reason": result.finish_reason,
                   "num_output_tokens": len(result.token_ids), "seconds": seconds,
                   "tokens_per_s": len(result.token_ids) / seconds if seconds else None,
                   "engine": str(engine_dir), "mode": engine.mode, "speculative": not no_spec,
                   "stats": result.stats.to_dict()})
        return
    last = None
    for last in engine.generate(prompt, stream=True, **kwargs):
        sys.stdout.write(last.text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()  # the answer's last line before the statistics on stderr, also through a pipe
    seconds = time.perf_counter() - started
    stats = last.stats
    click.echo(f"[{engine.mode}{'' if not no_spec else ', no-spec'}] {stats.num_output_tokens} tokens in "
               f"{seconds:.2f}s ({stats.num_output_tokens / seconds:.1f} tok/s), finish={last.finish_reason}, "
               f"mean acceptance length {stats.mean_acceptance_length:.2f}, "
               f"acceptance rate {stats.acceptance_rate:.2f}", err=True)


def _engine_from_spec(config_path: str | None) -> str:
    from trtspec import artifacts
    from trtspec.cli._options import resolve_spec

    spec = resolve_spec(config_path)
    name = artifacts.engine_name(spec.model_name, spec.speculative.mode, "cpu", spec.quantization.fp8)
    return str(artifacts.Layout.from_spec(spec).engine_dir(name))
