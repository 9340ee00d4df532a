"""The acceptance profile of an EAGLE-3 head: `speculation_profile.json`, written beside the head.

What it holds, per draft shape the build makes (the chain at `max_draft_len`, and the static
`eagle_choices` tree or the dynamic `tree` where the spec sets one), measured by trtspec's cpu
engine on the user's prompts, greedy, one request at a time (a lone sequence drafts its whole
shape: trtspec.runtime.policy.by_load):

- trtspec's figures: `mean_acceptance_length` (1 + accepted / drafts over all drafts, bonus
  included), `acceptance_per_position` (share of drafts whose position i was accepted: for a chain
  every earlier one was too), `accepted_per_position`, `drafts`;
- ModelOpt's. No file named speculation_profile.json exists in ModelOpt (`git grep` at
  NVIDIA/Model-Optimizer@a2fbac7b, 2026-08-21, finds none); its documented acceptance output is
  specdec_bench's `acceptance_rate.json` (examples/specdec_bench/specdec_bench/metrics/
  acceptance_rate.py), whose fields are kept with their names and meanings: `Request_AL` (per
  request: tokens per step, averaged over its steps), `Average_AL` (the mean of `Request_AL`: a
  mean of means, unlike mean_acceptance_length), `Acceptance_Length_Histogram` (steps by tokens
  they produced, accepted + 1), `Conditional_Acceptance_Rate` (k -> P(length >= k | length >= k-1))
  and `Joint_Acceptance_Rate` (k -> P(length >= k)); and from timing.py `Output TPS`;
- this machine's speed with and without the head (`speed`: tokens/s decoding each prompt with the
  head and without it, alternating which goes first, and their ratio), and the machine itself.

The histogram is exact from per-position counts: a chain's draft accepted at position i was
accepted at every earlier one, and a tree's accepted path is counted by depth the same way.
`read_profile` and `summary_line` are what `trtspec bench` shows. This module measures and writes
only the profile file; it never changes the head.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROFILE_FILE = "speculation_profile.json"
FORMAT = "trtspec-speculation-profile/1"
MODELOPT_FIELDS_SOURCE = ("NVIDIA/Model-Optimizer@a2fbac7b examples/specdec_bench/specdec_bench/metrics/"
                          "acceptance_rate.py (Request_AL, Average_AL, Acceptance_Length_Histogram, "
                          "Conditional_Acceptance_Rate, Joint_Acceptance_Rate) and timing.py (Output TPS)")
METHOD = "trtspec.runtime cpu engine (greedy, one request at a time)"


def draft_shapes(speculative) -> list[dict[str, Any]]:
    """The shapes a build makes from the spec's speculative section: the chain, then its tree."""
    shapes = [{"draft": f"chain of {speculative.max_draft_len}", "options": {}}]
    if speculative.eagle_choices:
        shapes.append({"draft": f"static tree of {len(speculative.eagle_choices)} nodes (eagle_choices)",
                       "options": {"eagle_choices": [list(path) for path in speculative.eagle_choices]}})
    if speculative.tree:
        tree = speculative.tree
        shapes.append({"draft": f"dynamic tree topk {tree.topk} depth {tree.depth} nodes {tree.num_draft_tokens}",
                       "options": {"tree": [tree.topk, tree.depth, tree.num_draft_tokens],
                                   "tree_min_path_prob": tree.min_path_prob}})
    return shapes


def shape_figures(requests: list, plain_seconds: float, plain_tokens: int, seconds: float,
                  max_draft_len: int) -> dict[str, Any]:
    """One shape's figures from its requests' GenerationStats (speculative decodings only)."""
    from trtspec.runtime.loop.stats import GenerationStats

    total = GenerationStats()
    for stats in requests:
        total.merge(stats)
    drafts = total.num_drafts
    accepted = list(total.accepted_per_position) + [0] * max(0, max_draft_len - len(total.accepted_per_position))
    # steps by tokens produced: length 1 + j where exactly j draft tokens passed
    at_least = [drafts, *accepted]  # at_least[j]: drafts with j or more accepted
    histogram = {str(j + 1): at_least[j] - (at_least[j + 1] if j + 1 < len(at_least) else 0)
                 for j in range(len(at_least))}
    conditional, joint = {}, {}
    for j in range(len(at_least)):
        joint[str(j + 1)] = round(at_least[j] / drafts, 4) if drafts else 0.0
        before = at_least[j - 1] if j else drafts
        conditional[str(j + 1)] = round(at_least[j] / before, 4) if before else 0.0
    request_al = {str(i): round(stats.mean_acceptance_length, 4) for i, stats in enumerate(requests)}
    tokens = total.num_output_tokens or sum(stats.num_output_tokens for stats in requests)
    speculative_tps = tokens / seconds if seconds else 0.0
    plain_tps = plain_tokens / plain_seconds if plain_seconds else 0.0
    return {
        "max_draft_len": max_draft_len, "drafts": drafts,
        "mean_acceptance_length": round(total.mean_acceptance_length, 4),
        "acceptance_rate": round(total.acceptance_rate, 4),
        "accepted_per_position": accepted,
        "acceptance_per_position": [round(count / drafts, 4) if drafts else 0.0 for count in accepted],
        "Request_AL": request_al,
        "Average_AL": round(sum(request_al.values()) / len(request_al), 4) if request_al else 0.0,
        "Acceptance_Length_Histogram": histogram,
        "Conditional_Acceptance_Rate": conditional, "Joint_Acceptance_Rate": joint,
        "Output TPS": round(speculative_tps, 2),
        "speed": {"concurrency": 1, "speculative_tokens_per_s": round(speculative_tps, 2),
                  "plain_tokens_per_s": round(plain_tps, 2),
                  "speedup": round(speculative_tps / plain_tps, 3) if plain_tps else None},
    }


def measure_profile(target_dir: Path, head_dir: Path, prompts: list[str], *, max_draft_len: int,
                    new_tokens: int, shapes: list[dict[str, Any]] | None = None, timed: bool = True,
                    on_prompt: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The profile of the head in `head_dir` on `prompts` (see the module docstring).

    `timed`: also decode every prompt without the head (alternating the order) for the speed-up
    here. Prompts are not kept between requests (`kv_cache_reuse_mib` 0), so the second decoding
    of a prompt pays its prefill like the first. Raises ImportError without trtspec.runtime."""
    from trtspec.convert.reports import machine_summary
    from trtspec.runtime import Engine

    shapes = shapes or [{"draft": f"chain of {max_draft_len}", "options": {}}]
    # the thread count fixed, as in reports.runtime_acceptance: two profiles of one head agree
    base = Engine.from_checkpoints(target_dir, mode="eagle3", draft_dir=head_dir, max_draft_len=max_draft_len,
                                   kv_cache_reuse_mib=0, adapt_threads=False)
    results = []
    try:
        plain = {"seconds": 0.0, "tokens": 0}
        for number, shape in enumerate(shapes):
            engine = base if not shape["options"] else base.variant(**_engine_options(shape["options"]))
            requests, seconds, lengths = [], 0.0, []
            try:
                for index, prompt in enumerate(prompts):
                    # plain decodings once, beside the chain; alternate which goes first
                    order = ((True, False) if index % 2 == 0 else (False, True)) if timed and number == 0 else (True,)
                    for speculative in order:
                        start = time.perf_counter()
                        result = engine.generate(prompt, max_new_tokens=new_tokens, temperature=0.0,
                                                 speculative=speculative)
                        elapsed = time.perf_counter() - start
                        if speculative:
                            seconds += elapsed
                            result.stats.num_output_tokens = len(result.token_ids)
                            requests.append(result.stats)
                            lengths.append(len(result.prompt_token_ids))
                        else:
                            plain["seconds"] += elapsed
                            plain["tokens"] += len(result.token_ids)
                    if on_prompt:
                        on_prompt(1)
            finally:
                if engine is not base:
                    engine.close()
            figures = shape_figures(requests, plain["seconds"], plain["tokens"], seconds, max_draft_len)
            if not timed:
                figures.pop("speed")
            if number == 0:  # the chain's acceptance by prompt length (trtspec.bench.context_buckets)
                from trtspec.bench.context_buckets import acceptance_by_length

                figures["by_context_length"] = acceptance_by_length(lengths, requests)
            results.append({"draft": shape["draft"], **({"options": shape["options"]} if shape["options"] else {}),
                            **figures})
    finally:
        base.close()
    return {"format": FORMAT, "method": METHOD, "modelopt_fields": MODELOPT_FIELDS_SOURCE,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine_summary(),
            "prompts": {"count": len(prompts), "new_tokens": new_tokens,
                        "sha256": hashlib.sha256(json.dumps(prompts).encode()).hexdigest()},
            "max_draft_len": max_draft_len, "shapes": results}


def profile_beside(spec, target_dir: Path, target_sha: str, head_dir: Path, prompts: list[str], *, new_tokens: int,
                   made_by: str, on_prompt: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Measure every draft shape the spec's build makes and write the profile beside `head_dir`
    (what convert does for each head it trains, fine-tunes or imports); return the profile."""
    from trtspec import artifacts

    measured = measure_profile(target_dir, head_dir, prompts, max_draft_len=spec.speculative.max_draft_len,
                               new_tokens=new_tokens, shapes=draft_shapes(spec.speculative), on_prompt=on_prompt)
    about = {"head": {"made_by": made_by, "weights_sha256": artifacts.weights_sha256(head_dir)},
             "target_sha256": target_sha}
    write_profile(head_dir, measured, **about)
    return {**measured, **about}


def _engine_options(options: dict[str, Any]) -> dict[str, Any]:
    """Engine.variant's fields for a shape (EngineConfig wants tuples)."""
    changes = dict(options)
    if "eagle_choices" in changes:
        changes["eagle_choices"] = tuple(tuple(path) for path in changes["eagle_choices"])
    if "tree" in changes:
        changes["tree"] = tuple(changes["tree"])
    return changes


def as_acceptance(profile: dict[str, Any]) -> dict[str, Any]:
    """The chain's figures in the form of convert's acceptance report (reports.runtime_acceptance)."""
    chain = profile["shapes"][0]
    measured = {"method": "trtspec.runtime cpu engine (greedy, exported head)", "max_draft_len": chain["max_draft_len"],
                "prompts": profile["prompts"]["count"], "steps": chain["drafts"],
                "mean_acceptance_length": round(chain["mean_acceptance_length"], 3),
                "acceptance_rate": round(chain["acceptance_rate"], 3),
                "accepted_per_position": chain["accepted_per_position"],
                "acceptance_per_position": [round(x, 3) for x in chain["acceptance_per_position"]]}
    if "speed" in chain:
        measured["speed"] = {**chain["speed"], "draft": chain["draft"]}
    return measured


def write_profile(head_dir: Path, profile: dict[str, Any], **about: Any) -> Path:
    """Write `profile` (plus `about`: head, target, prompts' source) as head_dir/speculation_profile.json."""
    path = Path(head_dir) / PROFILE_FILE
    path.write_text(json.dumps({**profile, **about}, indent=2) + "\n")
    return path


def read_profile(head_dir: Path) -> dict[str, Any] | None:
    """The profile beside a head, or None when it has none (or it is unreadable)."""
    path = Path(head_dir) / PROFILE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def summary_lines(profile: dict[str, Any]) -> list[str]:
    """One line per shape: what `trtspec bench` prints for the head it measures."""
    machine = profile.get("machine") or {}
    where = f"{machine.get('cpu', '?')}, {machine.get('threads', '?')} threads"
    lines = []
    for shape in profile.get("shapes", []):
        positions = " / ".join(f"{x:.2f}" for x in shape.get("acceptance_per_position", []))
        speed = shape.get("speed") or {}
        pays = (f"; {speed['speculative_tokens_per_s']} vs {speed['plain_tokens_per_s']} tokens/s without it "
                f"({speed['speedup']}x)" if speed.get("speedup") else "")
        lines.append(f"head profile ({profile['prompts']['count']} prompts x {profile['prompts']['new_tokens']} "
                     f"tokens, {profile.get('measured_at', '?')}, {where}): {shape['draft']}: mean acceptance "
                     f"length {shape['mean_acceptance_length']:.3f}, per position {positions}{pays}")
    return lines
