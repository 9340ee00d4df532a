"""The external draft-model rows of benchmarks/peers.py: the engine's draft-target mode and
HF `generate(assistant_model=...)`, on the same draft checkpoint, prompts and token ids.

No smaller model with SmolLM2's tokenizer exists offline, so `--draft-layers N` makes one from
SmolLM2 itself: its first N decoder layers read out through the final norm and tied lm_head
(trtspec.convert.first_layers, cached under ~/.cache/trtspec/models/smollm2-first<N>), an untrained
early-exit draft. `--draft-model DIR` takes any checkpoint with SmolLM2's tokenizer instead.

Contenders added (all greedy, outputs checked against the engine's plain greedy output):
- `engine-draft`: the engine in draft-target mode, `--draft-len` tokens per draft;
- `hf-assisted`: HF assisted generation made comparable: `num_assistant_tokens = --draft-len`,
  schedule "constant", `assistant_confidence_threshold = 0` (the engine drafts all of them too);
- `hf-assisted-default` (with `--hf-assisted-default`): the assistant's generation config as
  transformers ships it (5.14: 20 tokens, "constant", confidence threshold 0.4; the threshold's
  adaptation needs scikit-learn, absent here, so it stays at 0.4).

`--draft-sweep 4,8,...` only compares truncation depths (acceptance vs draft cost), see sweep().
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import dev_rows, smollm2

HF_DEFAULT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def add_arguments(parser) -> None:
    group = parser.add_argument_group("external draft model (engine draft-target vs HF assistant_model)")
    group.add_argument("--draft-model", type=Path, default=None, help="a draft checkpoint with SmolLM2's tokenizer")
    group.add_argument("--draft-layers", type=int, default=0,
                       help="build (once) and use SmolLM2's first N decoder layers as the draft model")
    group.add_argument("--draft-len", type=int, default=1,
                       help="draft tokens per step for engine-draft and hf-assisted (HF num_assistant_tokens)")
    group.add_argument("--hf-assisted-default", action="store_true",
                       help="also run HF assisted generation with the assistant's default generation config")
    group.add_argument("--draft-sweep", default=None, metavar="N,N,...",
                       help="only compare truncation depths: engine draft-target with SmolLM2's first N layers "
                            "vs the engine's plain greedy, first dev prompt of each category")


def draft_dir(args, target_path: Path) -> Path | None:
    """The draft checkpoint the arguments name (building the truncated copy if asked), or None."""
    if args.draft_layers:
        from trtspec.convert.first_layers import cache_dir, first_layers

        return first_layers(target_path, cache_dir("smollm2", args.draft_layers), args.draft_layers)
    return args.draft_model


def add_contenders(contenders: dict, args, target_path: Path, *, prepack: bool, hf, engine_run) -> None:
    """Add engine-draft, hf-assisted (and hf-assisted-default) to `contenders`, in place.

    `hf(ids, **generate_kwargs)` and `engine_run(engine, ids, speculative)` are peers.py's
    runners. HF's assistant is loaded as transformers loads it, like HF's target; with
    --hf-on-engine-model it is the engine's (prepacked) draft model, like HF's target then.
    """
    from trtspec.runtime import Engine
    from trtspec.runtime.checkpoints.parts import load_causal_lm

    directory = draft_dir(args, target_path)
    if directory is None:
        return
    engine = Engine.from_checkpoints(target_path, mode="draft-target", draft_dir=directory,
                                     max_draft_len=args.draft_len, prepack=prepack)
    assistant = engine.drafter.model if args.hf_on_engine_model else load_causal_lm(directory)
    shipped = {key: getattr(assistant.generation_config, key, None) for key in HF_DEFAULT_KEYS}
    comparable = {"num_assistant_tokens": args.draft_len, "num_assistant_tokens_schedule": "constant",
                  "assistant_confidence_threshold": 0.0}

    def assisted(settings):
        def run(ids):
            # HF reads these from the assistant's generation_config at every generate() call.
            for key, value in settings.items():
                setattr(assistant.generation_config, key, value)
            return hf(ids, assistant_model=assistant)
        return run

    contenders["engine-draft"] = lambda ids: engine_run(engine, ids, True)
    contenders["hf-assisted"] = assisted(comparable)
    if args.hf_assisted_default:
        contenders["hf-assisted-default"] = assisted(shipped)


def sweep(args) -> str:
    """Pick the truncation depth: per N, the engine's acceptance, draft cost and speedup.

    One generation per prompt (the first dev prompt of each category, --max-tokens, greedy) for
    the plain engine, then per N the draft-target engine with --draft-len; the draft cost c is
    draft time per draft token over the plain decode step time, both from the engine's stats.
    """
    import time

    import torch

    from trtspec.convert.first_layers import cache_dir, first_layers
    from trtspec.runtime import Engine
    from trtspec.runtime.loop.stats import GenerationStats

    torch.set_num_threads(args.threads or 1)
    path = smollm2()
    rows, seen = [], set()
    for row in dev_rows():
        if row["category"] not in seen:
            seen.add(row["category"])
            rows.append(row)

    def run(engine, speculative):
        ids = [engine.encode(row["prompt"]) for row in rows]
        engine.generate(ids[0][:16], max_new_tokens=8, speculative=speculative)  # warm-up
        stats, tokens, outputs, started = GenerationStats(), 0, [], time.perf_counter()
        for prompt in ids:
            result = engine.generate(prompt, max_new_tokens=args.max_tokens, speculative=speculative)
            stats.merge(result.stats)
            tokens += len(result.token_ids)
            outputs.append(result.token_ids)
        return tokens / (time.perf_counter() - started), stats, outputs

    plain_rate, plain, reference = run(Engine.from_checkpoints(path, mode="none"), False)
    plain_step = plain.verify_time_s / plain.num_target_passes
    lines = [f"plain: {plain_rate:.2f} tok/s, decode step {plain_step * 1e3:.1f} ms; draft length {args.draft_len}",
             "", "| layers N | mean acceptance length | acceptance rate | draft cost c | verify / plain step | "
             "tok/s | speedup | identical |", "|---" * 8 + "|"]
    for layers in (int(n) for n in args.draft_sweep.split(",")):
        draft = first_layers(path, cache_dir("smollm2", layers), layers)
        engine = Engine.from_checkpoints(path, mode="draft-target", draft_dir=draft, max_draft_len=args.draft_len)
        rate, stats, outputs = run(engine, True)
        cost = stats.draft_time_s / max(1, stats.num_draft_tokens) / plain_step
        verify = stats.verify_time_s / max(1, stats.num_target_passes) / plain_step
        same = sum(a == b for a, b in zip(outputs, reference, strict=True))
        lines.append(f"| {layers} | {stats.mean_acceptance_length:.2f} | {stats.acceptance_rate:.2f} | {cost:.2f} | "
                     f"{verify:.2f} | {rate:.2f} | {rate / plain_rate:.2f}x | {same}/{len(rows)} |")
    return "\n".join(lines)
