"""How many rows attention's matrix products need before a row's result stops depending on the count.

Why: MKL picks its batched-GEMM kernel by the number of rows, and kernels round their sums
differently. A query row must get the same numbers alone (a lone sequence's decode step) as
among other rows (a verify pass, a prompt chunk), so attention computes every product with at
least `min_rows()` rows, padding with zero rows it then drops. The threshold is a property
of the CPU and the MKL build, not of the model: measured 2 on the Intel machines this project
first ran on (only a lone row rounded apart) and 4 on an AMD EPYC (Zen 4, AVX-512) with the same
torch 2.13 (1 to 3 rows rounded apart from 4 or more). So it is probed once per thread count, on
the shapes attention uses: products with rows from the threshold up to many times it must all
agree, row for row, with one large product.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CANDIDATES = (2, 4, 8, 16, 32)
_PROBED: dict[int, int] = {}


def min_rows() -> int:
    """The fewest rows per product that give every row the same result as in any larger product,
    at the current torch thread count (probed once per count); the largest candidate when none
    passes (then batch invariance is not promised on this machine, and its test says so)."""
    import torch

    threads = torch.get_num_threads()
    if threads not in _PROBED:
        _PROBED[threads] = probe(CANDIDATES) or CANDIDATES[-1]
    return _PROBED[threads]


def fewest_rows_alike(rows_of: Callable[[int], Any], candidates: tuple[int, ...], largest: int,
                      also: tuple[int, ...] = ()) -> int | None:
    """The first candidate r such that every count of rows from r to 4 r (and the counts in
    `also`) gives each row what a `largest`-row product gives it; None when no candidate does. `rows_of(count)`:
    a product over the first `count` rows of fixed inputs, rows first. Shared by attention's probe
    (below) and the linear layers' (trtspec.runtime.forward.prepack)."""
    import torch

    reference = rows_of(largest)
    for rows in candidates:
        counts = sorted(set(range(rows, min(4 * rows, largest) + 1)) | set(also))
        if all(torch.equal(rows_of(count), reference[:count]) for count in counts):
            return rows
    return None


def probe(candidates: tuple[int, ...]) -> int | None:
    """fewest_rows_alike over both of attention's products (queries x transposed keys, weights x
    values; counts r..4 r, 63 and 100 against 256 rows), on strided slices of a pool as attention
    reads them: the larger answer, None if either has none."""
    import torch

    generator = torch.Generator().manual_seed(0)
    kv_heads, head_dim, keys = 3, 64, 128
    pool_keys = torch.randn(kv_heads, head_dim, 2 * keys, generator=generator)
    pool_values = torch.randn(kv_heads, 2 * keys, head_dim, generator=generator)
    products = ((torch.randn(kv_heads, 256, head_dim, generator=generator), pool_keys[:, :, keys:]),
                (torch.randn(kv_heads, 256, keys, generator=generator).softmax(-1), pool_values[:, keys:]))
    answers = [fewest_rows_alike(lambda count, left=left, right=right:
                                 torch.bmm(left[:, :count].contiguous(), right).transpose(0, 1), candidates, 256,
                                 also=(63, 100))
               for left, right in products]
    return None if None in answers else max(answers)
