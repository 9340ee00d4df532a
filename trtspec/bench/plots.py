"""PNG plots of a bench report (matplotlib, Agg backend: no display needed).

- throughput.png: output tokens/s, p99 E2E latency and p99 TPOT against concurrency,
  speculative vs baseline, with the speedup written over each speculative point.
- acceptance.png: share of verification steps that accepted k draft tokens, and the acceptance
  rate per draft position, one series per concurrency.
Each function takes the `results` list of bench.json and returns the path it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"speculative": "tab:blue", "baseline": "tab:gray", "triton": "tab:green", "in-process": "tab:purple"}


def _variants(results: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for r in results:
        if r["variant"] not in seen:
            seen.append(r["variant"])
    return seen


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(results: list[dict[str, Any]], variant: str, key: str) -> tuple[list[int], list[float]]:
    rows = sorted((r for r in results if r["variant"] == variant and r.get(key) is not None),
                  key=lambda r: r["max_concurrency"])
    return [r["max_concurrency"] for r in rows], [r[key] for r in rows]


def plot_throughput(results: list[dict[str, Any]], speedup: list[dict[str, Any]], path: Path, title: str) -> Path:
    plt = _pyplot()
    fig, (ax_tps, ax_e2e, ax_tpot) = plt.subplots(1, 3, figsize=(13, 4.2))
    panels = [(ax_tps, "output_throughput", 1.0, "Output tokens/s (higher is better)", "tokens/s"),
              (ax_e2e, "p99_e2el_ms", 1000.0, "p99 end-to-end latency (lower is better)", "seconds"),
              (ax_tpot, "p99_tpot_ms", 1.0, "p99 time per output token (lower is better)", "ms")]
    concurrencies = sorted({r["max_concurrency"] for r in results})
    for axis, key, scale, panel_title, unit in panels:
        top = 0.0
        for variant in _variants(results):
            xs, ys = _series(results, variant, key)
            if xs:
                axis.plot(xs, [y / scale for y in ys], "o-", color=COLORS.get(variant), label=variant, linewidth=2)
                top = max(top, max(ys) / scale)
        axis.set(title=panel_title, xlabel="concurrency", ylabel=unit)
        axis.set_xticks(concurrencies)
        axis.margins(x=0.08)
        axis.set_ylim(0, top * 1.2 or 1.0)  # from zero, with room for the speedup labels
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="best")
    by_conc = {s["max_concurrency"]: s for s in speedup}
    first = _variants(results)[0]   # the numerator of the ratios: speculative, or triton for overhead runs
    for x, y in zip(*_series(results, first, "output_throughput"), strict=True):
        ratio = by_conc.get(x, {}).get("output_throughput_speedup")
        if ratio is not None:
            ax_tps.annotate(f"{ratio:.2f}x", (x, y), textcoords="offset points", xytext=(0, 8),
                            ha="center", fontsize=10, fontweight="bold", color=COLORS.get(first))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_acceptance(results: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """None when no result carries a histogram (baseline-only runs, or Triton without positions)."""
    rows = [r for r in results if r.get("spec_decode_accepted_per_step_histogram")]
    if not rows:
        return None
    plt = _pyplot()
    fig, (ax_hist, ax_pos) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        hist = row["spec_decode_accepted_per_step_histogram"]
        steps = sum(hist) or 1
        xs = [k + (i - (len(rows) - 1) / 2) * width for k in range(len(hist))]
        prefix = "" if row["variant"] == "speculative" else f"{row['variant']} "
        label = f"{prefix}conc {row['max_concurrency']} (AL {row['spec_decode_acceptance_length']:.2f})"
        ax_hist.bar(xs, [100.0 * h / steps for h in hist], width=width, label=label)
        rates = row.get("spec_decode_per_position_acceptance_rates") or []
        ax_pos.plot(range(1, len(rates) + 1), [100.0 * r for r in rates], "o-",
                    label=f"{prefix}conc {row['max_concurrency']}")
    longest = max(len(r["spec_decode_accepted_per_step_histogram"]) for r in rows)
    ax_hist.set_xticks(range(longest))
    ax_hist.set(title="Accepted draft tokens per verification step", xlabel="accepted draft tokens",
                ylabel="% of steps")
    ax_pos.set_xticks(range(1, longest))
    ax_pos.set(title="Acceptance rate per draft position", xlabel="draft position", ylabel="% of drafts accepted",
               ylim=(0, 100))
    for axis in (ax_hist, ax_pos):
        axis.grid(alpha=0.3, axis="y")
        axis.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
