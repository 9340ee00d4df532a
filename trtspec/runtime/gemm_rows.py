"""How many rows attention's matrix products need before a row's result stops depending on the count.

Why: MKL picks its batched-GEMM kernel by the number of rows, and kernels round their sums
differently. A query row must get the same numbers alone (a lone sequence's decode step) as
among other rows (a verify pass, a prompt chunk), so attention computes every product with at
least `min_rows()` rows, padding with copies of a row it then drops. The threshold is a property
of the CPU and the MKL build, not of the model: measured 2 on the Intel machines this project
first ran on (only a lone row rounded apart) and 4 on an AMD EPYC (Zen 4, AVX-512) with the same
torch 2.13 (1 to 3 rows rounded apart from 4 or more). So it is probed once per thread count, on
the shapes attention uses: products with rows from the threshold up to many times it must all
agree, row for row, with one large product.
"""

from __future__ import annotations

CANDIDATES = (2, 4, 8, 16, 32)
_PROBED: dict[int, int] = {}


def min_rows() -> int:
    """The fewest rows per product that give every row the same result as in any larger product,
    at the current torch thread count (probed once per count); the largest candidate when none
    passes (then batch invariance is not promised on this machine, and its test says so)."""
    import torch

    threads = torch.get_num_threads()
    if threads not in _PROBED:
        _PROBED[threads] = next((rows for rows in CANDIDATES if _invariant_from(rows)), CANDIDATES[-1])
    return _PROBED[threads]


def _invariant_from(rows: int) -> bool:
    """True when products of `rows`..4*`rows` rows (and a few larger) each match a 256-row product
    row for row, for both of attention's products (queries x transposed keys, weights x values),
    read as strided slices of a larger pool as attention reads them."""
    import torch

    generator = torch.Generator().manual_seed(0)
    kv_heads, head_dim, keys = 3, 64, 128
    pool_keys = torch.randn(kv_heads, head_dim, 2 * keys, generator=generator)
    pool_values = torch.randn(kv_heads, 2 * keys, head_dim, generator=generator)
    for left, right in ((torch.randn(kv_heads, 256, head_dim, generator=generator), pool_keys[:, :, keys:]),
                        (torch.randn(kv_heads, 256, keys, generator=generator).softmax(-1), pool_values[:, keys:])):
        reference = torch.bmm(left, right)
        for count in sorted(set(range(rows, 4 * rows + 1)) | {63, 100}):
            if not torch.equal(torch.bmm(left[:, :count].contiguous(), right), reference[:, :count]):
                return False
    return True
