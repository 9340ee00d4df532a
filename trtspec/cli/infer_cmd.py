"""`trtspec infer "prompt"`: one request to the server over gRPC streaming."""

from __future__ import annotations

import click

from trtspec.cli._options import config_option, emit_json, json_option, request_options, resolve_spec

EXAMPLES = """\b
Examples:
  trtspec infer "What is the capital of France?"
  trtspec infer --max-tokens 64 --temperature 0.7 --seed 1 "Write a haiku about GPUs"
  trtspec infer --no-stream --json "Summarize: ..."
  trtspec infer --no-spec "..."            # the same request without speculation (cpu backend)
  trtspec infer --url 10.0.0.5:8001 --model ensemble "..."
  trtspec infer --raw "The capital of France is"   # text_input as typed, no chat template
"""
@click.command(epilog=EXAMPLES)
@click.argument("prompt")
@config_option
@click.option("--url", default=None, help="gRPC host:port (default serve.host:serve.grpc_port from the spec).")
@click.option("--model", default=None, help="Served model (default: tensorrt_llm_bls, ensemble or tensorrt_llm).")
@request_options(max_tokens=64, temperature=None)
@click.option("--no-stream", is_flag=True, help="Ask for the whole answer in one response.")
@click.option("--no-spec", is_flag=True, help="Turn speculation off for this request (cpu backend; baselines).")
@click.option("--raw", is_flag=True, help="Send PROMPT as text_input unchanged, without the target's chat template.")
@json_option
def infer(prompt: str, config_path: str | None, url: str | None, model: str | None, max_tokens: int,
          temperature: float | None, top_p: float | None, top_k: int | None, seed: int | None,
          no_stream: bool, no_spec: bool, raw: bool, as_json: bool) -> None:
    """Send PROMPT to the Triton server and print the answer as it streams in.

    PROMPT goes as one user turn through the target's chat template, applied here (the server
    reads text_input as it is, as Triton's stock llmapi model does); --raw sends it unchanged.
    --json prints the text, token counts, time to first token, total time and the acceptance
    statistics instead.
    """
    from trtspec.client.prompting import renderer
    from trtspec.client.triton import TritonLLMClient, pick_model

    spec = resolve_spec(config_path)
    if url is None and model is None and _dynamo_here(spec):  # deploy --target dynamo: its OpenAI frontend
        _infer_dynamo(spec, prompt, raw, max_tokens, temperature, top_p, seed, as_json)
        return
    render = renderer(spec, raw)
    text_input = render(prompt)
    host = "127.0.0.1" if spec.serve.host in ("0.0.0.0", "") else spec.serve.host
    url = url or f"{host}:{spec.serve.grpc_port}"
    client = TritonLLMClient(url, model or pick_model(url),
                             metrics_url=f"http://{url.rsplit(':', 1)[0]}:{spec.serve.metrics_port}/metrics")
    options = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                   speculative=not no_spec, stream=not no_stream)
    if as_json:
        emit_json({"model": client.model, "url": url, "prompt_sent": render.describe(),
                   **client.generate(text_input, **options)})
        return
    stats, total, count = {}, 0.0, 0
    for event in client.stream(text_input, **options):
        click.echo(event.text, nl=False)
        stats.update(event.stats)
        total = event.time_s
        count += 1
    click.echo()
    parts = [f"{stats.get('num_output_tokens', '?')} tokens in {total:.2f} s ({count} responses)"]
    if stats.get("finish_reason"):
        parts.append(f"finish {stats['finish_reason']}")
    if "total_draft_tokens" in stats:
        parts.append(f"accepted {stats['total_accepted_draft_tokens']}/{stats['total_draft_tokens']} draft tokens "
                     f"(rate {stats.get('acceptance_rate', 0.0):.2f})")
    if stats.get("num_drafts"):
        parts.append(f"mean acceptance length {1 + stats['total_accepted_draft_tokens'] / stats['num_drafts']:.2f}")
    click.secho("; ".join(parts), dim=True, err=True)


def _dynamo_here(spec) -> bool:
    from trtspec.artifacts import Layout
    from trtspec.serve import targets

    return targets.running(Layout.from_spec(spec)).speaks == "openai"


def _infer_dynamo(spec, prompt: str, raw: bool, max_tokens: int, temperature, top_p, seed, as_json: bool) -> None:
    """One request through the Dynamo frontend's OpenAI API (trtspec.serve.dynamo.ask)."""
    from trtspec.artifacts import Layout
    from trtspec.serve.dynamo import ask

    url = ask.base_url(Layout.from_spec(spec))
    pieces, stats = [], {}
    for text, final in ask.stream(url, spec.model_name, prompt, raw=raw, max_tokens=max_tokens,
                                  temperature=temperature, top_p=top_p, seed=seed):
        if final is not None:
            stats = final
        elif as_json:
            pieces.append(text)
        else:
            click.echo(text, nl=False)
    if as_json:
        emit_json({"model": spec.model_name, "url": url, "text": "".join(pieces), **stats})
        return
    click.echo()
    parts = [f"{stats.get('num_output_tokens', '?')} tokens in {stats['time_s']:.2f} s (Dynamo {url})",
             f"finish {stats.get('finish_reason')}"]
    if stats.get("accepted_prediction_tokens") is not None:
        drafted = stats["accepted_prediction_tokens"] + (stats.get("rejected_prediction_tokens") or 0)
        parts.append(f"accepted {stats['accepted_prediction_tokens']}/{drafted} draft tokens")
    click.secho("; ".join(parts), dim=True, err=True)

