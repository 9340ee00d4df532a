"""Throughput scaling with load: each variant's tokens/s at every concurrency over its lowest one."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def scaling(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each variant's tokens/s at every concurrency over its tokens/s at the lowest one measured,
    the median of per-repeat ratios (repeat r against repeat r). A repeat runs its concurrencies one
    after the other (trtspec.bench.load.schedule), so each ratio carries the machine's drift over
    one repeat, not over the whole run."""
    out = []
    for variant in dict.fromkeys(s["variant"] for s in summaries):
        cells = sorted((s for s in summaries if s["variant"] == variant), key=lambda s: s["max_concurrency"])
        if len(cells) < 2:
            continue
        first = cells[0]
        for cell in cells[1:]:
            ratios = [a / b for a, b in zip(cell["output_throughput_by_repeat"], first["output_throughput_by_repeat"],
                                            strict=False) if b > 0]
            out.append({"variant": variant, "max_concurrency": cell["max_concurrency"],
                        "over_concurrency": first["max_concurrency"],
                        "output_throughput_scaling": statistics.median(ratios) if ratios else math.nan,
                        "output_throughput_scaling_by_repeat": ratios})
    return out
