"""Medusa: heads on the target's last hidden state draft a static tree (`medusa_choices`), which
the engine verifies in one pass like any tree (trtspec.runtime.verify.tree).

Vocabulary (Cai et al. 2024, "Medusa"; FasterDecoding/Medusa medusa_model.py, utils.py):
- h: the target's last hidden state (the last decoder layer's output, through the target's own
  final norm) at the last position it kept; the target's lm_head(h) is the pending token, the one
  every verify pass starts from;
- head k (0-based): ResBlock x L (x + SiLU(W x + b)) then a vocabulary projection; from h it
  predicts the token k + 1 places after the pending one, i.e. depth k + 1 of the draft tree;
- the tree: index paths, [0, 1] meaning head 1's second-best token as the child of head 0's best.
  A node at depth d takes the rank-th top token of head d - 1; its parent does not change it (the
  heads all read the same h), as in Medusa's generate_candidates.

The drafter keeps no cache and runs no model: each session keeps the one row of the target's
verify pass it needs (`on_verified`: the last kept position), and `propose_batch` runs the heads
for every session at once. Where every head's projection is the target's lm_head (trtspec's own
trainer ties them, convert/medusa/train.py), it runs as ONE product of the target's (prepacked)
lm_head over all heads and sessions, so the heads cost about one lm_head pass per step instead of
num_heads. Drafts are point masses chosen from the past alone (top-k, distinct per node), so tree
verification (greedy walk, or multi-candidate rejection under sampling) keeps greedy output the
target's own and sampling the target's distribution.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import ModelSourceError
from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession

HEADS_FILE = "medusa_lm_head.safetensors"  # the canonical layout trtspec convert writes (convert/medusa)
# the default draft tree when engine.json gives none (trtspec.spec.medusa.DEFAULT_CHOICES)
DEFAULT_CHOICES = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0))


class MedusaDrafter(Drafter):
    kind = "medusa"

    def __init__(self, blocks: list[list[tuple[Any, Any]]], projections: list[Any] | None, target: Any,
                 choices: Any = None):
        from trtspec.runtime.verify.tree import Tree

        self.blocks = blocks               # per head, per ResBlock: (weight [hidden, hidden], bias [hidden])
        self.projections = projections     # per head a Linear; None: every head uses the target's lm_head
        self.norm = target.model.norm
        self.lm_head = target.get_output_embeddings()
        self.num_heads = len(blocks)
        # the last decoder layer's output (hidden_states index num_layers); the norm is applied here
        self.aux_layer_ids = (len(target.model.layers),)
        paths = [list(p) for p in (choices or [p for p in DEFAULT_CHOICES if len(p) <= self.num_heads])]
        self.tree = Tree(paths)            # the static tree every session fills (Engine.tree)
        if self.tree.max_depth > self.num_heads:
            raise ModelSourceError(f"medusa choices reach depth {self.tree.max_depth}, the heads are {self.num_heads}",
                                   fix="drop the deeper paths from speculative.medusa.choices")
        self._cut: dict[int, Any] = {self.tree.max_depth: self.tree}

    @classmethod
    def from_dir(cls, path: Path | str, target: Any, choices: Any = None) -> MedusaDrafter:
        """Heads in trtspec's canonical layout (FasterDecoding's safetensors keys)."""
        import torch
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / HEADS_FILE).is_file() or not (path / "config.json").is_file():
            raise ModelSourceError(f"{path}: no {HEADS_FILE} with its config.json",
                                   fix="run `trtspec convert --mode medusa` to train or import the heads")
        config = json.loads((path / "config.json").read_text())
        heads, layers = int(config["medusa_num_heads"]), int(config["medusa_num_layers"])
        state = {k: v.float() for k, v in load_file(str(path / HEADS_FILE)).items()}
        expected = {f"{h}.{layers}.weight" for h in range(heads)} | {
            f"{h}.{layer}.linear.{part}" for h in range(heads) for layer in range(layers) for part in ("weight", "bias")}
        if set(state) != expected:
            odd = sorted(set(state) ^ expected)[0]
            raise ModelSourceError(f"{path}: {HEADS_FILE} does not hold {heads} heads of {layers} ResBlocks ({odd})",
                                   fix="re-run `trtspec convert --mode medusa`")
        blocks = [[(state[f"{h}.{layer}.linear.weight"], state[f"{h}.{layer}.linear.bias"]) for layer in range(layers)]
                  for h in range(heads)]
        lm_weight = target.get_output_embeddings().weight
        projections = None
        if not all(torch.equal(state[f"{h}.{layers}.weight"], lm_weight) for h in range(heads)):
            projections = []
            for h in range(heads):
                linear = torch.nn.Linear(lm_weight.shape[1], lm_weight.shape[0], bias=False)
                linear.weight = torch.nn.Parameter(state[f"{h}.{layers}.weight"], requires_grad=False)
                projections.append(linear.eval())
        return cls(blocks, projections, target, choices)

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None, kv=None) -> MedusaSession:
        return MedusaSession(self)

    def tree_for(self, max_len: int) -> Any:
        """The tree, cut to `max_len` levels where the step allows fewer (every cut keeps ancestors)."""
        from trtspec.runtime.verify.tree import Tree

        depth = min(max_len, self.tree.max_depth)
        if depth not in self._cut:
            self._cut[depth] = Tree([p for p in self.tree.paths if len(p) <= depth])
        return self._cut[depth]

    def head_logits(self, hidden: Any, depth: int) -> Any:
        """Logits of heads 0..depth-1 for every row. # hidden: [rows, hidden_size] -> [depth, rows, vocab]"""
        import torch
        import torch.nn.functional as F

        x = self.norm(hidden)
        outputs = []
        for blocks in self.blocks[:depth]:
            y = x
            for weight, bias in blocks:
                y = y + F.silu(F.linear(y, weight, bias))
            outputs.append(y)
        if self.projections is None:  # one product of the target's lm_head for every head and row
            return self.lm_head(torch.stack(outputs).unsqueeze(0))[0].float()
        return torch.stack([proj(y) for proj, y in zip(self.projections, outputs, strict=False)]).float()

    def propose_batch(self, sessions, tokens, max_lens):
        import torch

        with torch.no_grad():
            # 1. Every session's tree, cut to its draft length (a static tree: the whole of it).
            trees = [self.tree_for(k) for k in max_lens]
            depth = max(t.max_depth for t in trees)
            # 2. The heads over every session's last hidden state: one batch.
            logits = self.head_logits(torch.stack([s.last for s in sessions]), depth)  # [depth, B, vocab]
            # 3. Per depth the top tokens the tree's ranks need; node i takes its rank at its depth.
            needed = [1 + max(p[-1] for p in self.tree.paths if len(p) == d) for d in range(1, depth + 1)]
            top = [torch.topk(logits[d], needed[d], dim=-1).indices for d in range(depth)]  # [B, k_d] each
        drafts: list[Draft | None] = []
        for index, tree in enumerate(trees):
            nodes = [int(top[len(path) - 1][index, path[-1]]) for path in tree.paths]
            drafts.append(Draft(torch.tensor(nodes, dtype=torch.long), tree=tree))
        return drafts


class MedusaSession(DraftSession):
    def __init__(self, drafter: MedusaDrafter):
        self.drafter = drafter
        self.last: Any = None  # [hidden_size] the target's last decoder layer output at its last kept position

    def on_verified(self, kept_hidden: Any) -> None:
        # A copy of one row: the rows are a view of the whole step's aux tensor, which must not outlive it.
        self.last = kept_hidden[-1].clone()

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        return self.drafter.propose_batch([self], [tokens], [max_len])[0]


def make(parts: Any) -> MedusaDrafter:
    """The mode's factory (trtspec.modes row `medusa`); options["medusa_choices"]: the tree, or None."""
    drafter = MedusaDrafter.from_dir(parts.need_draft_dir(), parts.target, parts.options.get("medusa_choices"))
    for projection in drafter.projections or ():
        parts.prepack(projection)  # untied heads: each projection on the target's kernels
    return drafter
