"""The KV blocks a trtspec worker keeps, published to Dynamo's KV router.

The engine's prompt cache (trtspec.runtime.cache.prefix_reuse.PromptCache) announces each prompt it
keeps and drops; trtspec.runtime.cache.block_events turns those into stored/removed blocks of the
engine's `tokens_per_block` (the block size the worker registered, LlmRegistration.kv_cache_block_size:
the router drops blocks of any other size), and here they go to the `KvEventPublisher` Dynamo's
Worker hands over (`PushSource.on_ready`). Only committed prompt tokens are ever published.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def push_source(engine: Any) -> Any:
    """A dynamo PushSource that wires the engine's kept prompts to the publisher; None when the
    engine keeps none (kv_cache_reuse off, or kv_cache_reuse_mib 0): the router then learns nothing."""
    from dynamo.common.backend.publisher import PushSource

    reuse = engine.scheduler.reuse
    cache = getattr(reuse, "kept", None)
    if cache is None:
        log.warning("trtspec worker: the engine keeps no prompts (kv_cache_reuse off or kv_cache_reuse_mib 0); "
                    "no KV events, the KV router routes by load only")
        return None

    def on_ready(publisher: Any) -> None:
        from trtspec.runtime.cache.block_events import BlockEvents

        def stored(tokens: list[int], sizes: list[int], hashes: list[int], parent: int | None) -> None:
            try:
                publisher.publish_stored(tokens, sizes, hashes, parent_hash=parent)
            except Exception:  # noqa: BLE001 - a lost event costs a routing hint, never a request
                log.exception("publish_stored failed")

        def removed(hashes: list[int]) -> None:
            try:
                publisher.publish_removed(hashes)
            except Exception:  # noqa: BLE001
                log.exception("publish_removed failed")

        cache.listener = BlockEvents(int(engine.config.tokens_per_block), stored, removed)

    return PushSource(on_ready=on_ready)
