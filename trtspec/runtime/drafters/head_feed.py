"""What one head forward takes for one session: the EAGLE-3 drafter's unit of batched input.

Its own module because both the chain proposals (eagle3.py) and the static-tree proposals
(eagle3_tree.py) build feeds, and eagle3.py calls the tree code: the shared type sits below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HeadFeed:
    """New EAGLE positions of one session: tokens, the hidden rows they pair with, where they go."""

    kv: Any
    token_ids: list[int]
    hidden: Any  # [tokens, hidden_size]
    positions: list[int] | None = None
    mask: Any = None
    num_logits: int = 1
