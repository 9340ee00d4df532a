"""KV-cache surgery on transformers' DynamicCache: crop to a length, keep selected positions.

`crop(cache, n)` keeps the first n positions (DynamicCache.crop treats n <= 0 as "remove -n",
so cropping to 0 needs care). `keep_positions(cache, start, indices)` keeps positions [0, start)
followed by `indices` (ascending), which is how a verified tree keeps only its accepted path.
Nothing here knows about drafts or tokens.
"""

from __future__ import annotations


def crop(cache, length: int, config=None):
    """Keep the first `length` positions of every layer; returns the cache (same object)."""
    if length > 0:
        cache.crop(length)
        return cache
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False) and layer.keys.numel():
            layer.keys = layer.keys[..., :0, :]
            layer.values = layer.values[..., :0, :]
    return cache


def keep_positions(cache, start: int, indices: list[int]):
    """Keep positions [0, start) then `indices` (absolute, each >= start, ascending)."""
    import torch

    if indices == list(range(start, start + len(indices))):
        return crop(cache, start + len(indices))
    index = torch.tensor(indices, dtype=torch.long)
    for layer in cache.layers:
        layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys.index_select(-2, index)], dim=-2)
        layer.values = torch.cat([layer.values[..., :start, :], layer.values.index_select(-2, index)], dim=-2)
    return cache
