"""`trtspec generate`: run the cpu engine in-process on one prompt (no server)."""

from __future__ import annotations

import statistics
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
  trtspec generate --engine DIR "Hi" --compare                   # speculative and plain, measured alike
  trtspec generate --engine DIR "Hi" --compare --repeats 5       # five rounds, order alternating: the median ratio

Timing: a first generation in a process pays one-time costs (probes and kernels set up on first
use, weights first read from memory), several times the answer's own time on a 2-core CPU. So a
short warm-up generation of the same request runs first and is reported apart ("warm-up: ..."),
and the figures after it are the steady state (--no-warmup: time the first call, costs included).
"""

WARMUP_TOKENS = 16  # the warm-up's length: the same request, cut short


@click.command(epilog=EPILOG)
@click.argument("prompt")
@click.option("--engine", "engine_dir", type=click.Path(file_okay=False), default=None,
              help="Engine directory (engine.json); default: the engine the spec builds with --backend cpu.")
@request_options(max_tokens=128, temperature=0.0)
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--no-spec", is_flag=True, help="Decode without speculation (the baseline).")
@click.option("--compare", is_flag=True,
              help="Generate speculatively, then without speculation, in this process after a warm-up of "
                   "each: both figures measured alike, and their ratio.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --compare: rounds of both after the warm-ups, which goes first alternating; the "
                   "ratio printed is the median of the rounds' ratios (one short answer is a noisy figure).")
@click.option("--warmup/--no-warmup", default=True, show_default=True,
              help=f"Pay the one-time costs first: a {WARMUP_TOKENS}-token run of the same request, "
                   "reported apart.")
@click.option("--raw", is_flag=True, help="Do not apply the chat template to the prompt.")
@config_option
@json_option
def generate(prompt: str, engine_dir: str | None, max_tokens: int, temperature: float, top_p: float | None,
             top_k: int | None, seed: int | None, stop: tuple[str, ...], no_spec: bool, compare: bool, repeats: int,
             warmup: bool, raw: bool, config_path: str | None, as_json: bool) -> None:
    """Generate text with the cpu engine, streaming it to stdout; statistics go to stderr."""
    from trtspec.errors import TrtSpecError
    from trtspec.runtime import load_engine

    if compare and no_spec:
        raise TrtSpecError("--compare runs both speculative and plain decoding; --no-spec asks for plain only",
                           fix="drop one of --compare and --no-spec")
    if repeats > 1 and not compare:
        raise TrtSpecError("--repeats sets the rounds of --compare; without it there is no ratio to repeat",
                           fix="add --compare, or drop --repeats")
    if engine_dir is None:
        engine_dir = _engine_from_spec(config_path)
    engine = load_engine(engine_dir)
    kwargs = {"max_new_tokens": max_tokens, "temperature": temperature,
              "top_k": 0 if top_k is None else top_k, "top_p": 1.0 if top_p is None else top_p,
              "seed": seed, "stop": list(stop) or None, "chat": False if raw else None}
    variants = [True, False] if compare else [not no_spec]
    warmed = {speculative: _warm_up(engine, prompt, kwargs, speculative, as_json) if warmup else None
              for speculative in variants}
    rounds = []
    for index in range(repeats):
        order = variants if index % 2 == 0 else variants[::-1]  # who goes first alternates
        rounds.append({speculative: _timed(engine, prompt, kwargs, speculative,
                                           echo=not as_json and index == 0 and speculative == variants[0])
                       for speculative in order})
    runs = [{**rounds[0][speculative], "engine": str(engine_dir), "mode": engine.mode, "speculative": speculative,
             "warmup_seconds": warmed[speculative]} for speculative in variants]
    ratios = [_ratio(timed[True], timed[False]) for timed in rounds] if compare else []
    if as_json:
        emit_json(runs[0] if not compare else {"speculative": runs[0], "plain": runs[1],
                                                "speedup": statistics.median(ratios), "rounds": ratios})
        return
    for run in runs:
        if run is not runs[0] and run["text"] != runs[0]["text"]:
            click.echo(f"plain decoding wrote other text:\n{run['text']}")
        click.echo(_line(engine.mode, run), err=True)
    if compare:
        of_rounds = (f"median of {repeats} rounds: {', '.join(f'{ratio:.2f}' for ratio in ratios)}; "
                     if repeats > 1 else "")
        click.echo(f"speculative / plain: {statistics.median(ratios):.2f}x tokens/s ({of_rounds}one process, each "
                   f"after {'its warm-up' if warmup else 'no warm-up'})", err=True)


def _warm_up(engine, prompt: str, kwargs: dict, speculative: bool, quiet: bool) -> float:
    """The same request cut to WARMUP_TOKENS, untimed output: what a process's first generation
    pays once (set-up on first use, the weights' first read) stays out of the figures; its seconds."""
    started = time.perf_counter()
    result = engine.generate(prompt, speculative=speculative, **{**kwargs, "max_new_tokens": min(
        WARMUP_TOKENS, kwargs["max_new_tokens"])})
    seconds = time.perf_counter() - started
    if not quiet:
        click.echo(f"[warm-up{'' if speculative else ', no-spec'}] {len(result.token_ids)} tokens in {seconds:.2f}s "
                   "(one-time costs, not in the figures below)", err=True)
    return seconds


def _timed(engine, prompt: str, kwargs: dict, speculative: bool, echo: bool) -> dict:
    """One generation, streamed to stdout when `echo`: its text, tokens, time and statistics."""
    started = time.perf_counter()
    if echo:
        pieces, token_ids, last = [], [], None
        for last in engine.generate(prompt, stream=True, speculative=speculative, **kwargs):
            pieces.append(last.text)
            token_ids.extend(last.token_ids)
            sys.stdout.write(last.text)
            sys.stdout.flush()
        seconds = time.perf_counter() - started
        sys.stdout.write("\n")
        sys.stdout.flush()  # the answer's last line before the statistics on stderr, also through a pipe
        if last is None:
            raise RuntimeError("the engine's stream ended without a chunk")
        text, finish_reason, stats = "".join(pieces), last.finish_reason, last.stats
    else:
        result = engine.generate(prompt, speculative=speculative, **kwargs)
        seconds = time.perf_counter() - started
        text, token_ids, finish_reason, stats = result.text, list(result.token_ids), result.finish_reason, result.stats
    return {"text": text, "token_ids": token_ids, "finish_reason": finish_reason, "num_output_tokens": len(token_ids),
            "seconds": seconds, "tokens_per_s": len(token_ids) / seconds if seconds else None,
            "stats": stats.to_dict()}


def _ratio(speculative: dict, plain: dict) -> float:
    return speculative["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else float("nan")


def _line(mode: str, run: dict) -> str:
    stats = run["stats"]
    return (f"[{mode}{'' if run['speculative'] else ', no-spec'}] {run['num_output_tokens']} tokens in "
            f"{run['seconds']:.2f}s ({run['tokens_per_s']:.1f} tok/s), finish={run['finish_reason']}, "
            f"mean acceptance length {stats['mean_acceptance_length']:.2f}, "
            f"acceptance rate {stats['acceptance_rate']:.2f}")


def _engine_from_spec(config_path: str | None) -> str:
    from trtspec import artifacts
    from trtspec.cli._options import resolve_spec

    spec = resolve_spec(config_path)
    name = artifacts.engine_name(spec.model_name, spec.speculative.mode, "cpu", spec.quantization.fp8)
    return str(artifacts.Layout.from_spec(spec).engine_dir(name))
