"""`speculative.medusa`: the Medusa heads (trained by `trtspec convert`, or imported) and the tree
they draft (trtspec.modes: the row; reference heads-and-methods.md section 3)."""

from __future__ import annotations

from pydantic import Field, field_validator

from trtspec.spec.section import Section

# The default tree for heads of any depth (cut to num_heads levels): 9 nodes. Medusa's own
# mc_sim_7b_63 has 63, sized for a GPU where a wider verify pass costs nothing; on a CPU every node
# is a row of the target's verify pass.
DEFAULT_HEADS, DEFAULT_LAYERS = 4, 1   # what convert trains when num_heads / num_layers are empty
DEFAULT_CHOICES = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0))


def default_choices(num_heads: int) -> list[list[int]]:
    """DEFAULT_CHOICES with the levels `num_heads` heads can fill."""
    return [list(path) for path in DEFAULT_CHOICES if len(path) <= num_heads]


class MedusaSpec(Section):
    heads: str | None = None
    """Existing Medusa heads to import instead of training them: a directory or a Hugging Face hub
    id holding FasterDecoding's layout (medusa_lm_head.safetensors or .pt, config.json with
    medusa_num_heads and medusa_num_layers) or ModelOpt's (medusa_heads.* tensors in *.safetensors).
    Checked against the target, written as checkpoints/medusa. Empty: convert trains them on the
    target's own answers."""
    num_heads: int | None = Field(None, ge=1, le=16)
    """Heads, one per draft depth (Medusa's medusa_num_heads). Empty: 4 when training; imported
    heads: as many as their tensors hold (FasterDecoding's hub configs have been wrong about it)."""
    num_layers: int | None = Field(None, ge=1, le=8)
    """ResBlocks per head (medusa_num_layers). Empty: 1 when training; imported heads: theirs."""
    choices: list[list[int]] | None = None
    """The draft tree as index paths (Medusa's medusa_choices, TensorRT-LLM's --medusa_choices):
    [0, 1] is head 1's top token as the child of head 0's top token; every prefix must be listed
    and no path may be deeper than num_heads. Empty: a 9-node tree of depth at most 4, cut to
    num_heads levels. TensorRT engines are built with max_draft_len = its number of nodes."""
    train_seconds: int = Field(180, ge=1, le=86_400)
    """convert: time for training the heads (after the target's answers are made). Minutes give
    weak heads: SmolLM2, 240 s (64 steps) on its answers to 64 packaged prompts, held-out top-1
    0.19/0.11/0.07/0.06 per head, accepted 0.30 tokens per draft and ran 0.80x plain decoding on
    4 held-out dev prompts (one thread, a loaded 2-core Xeon; n-gram 1.03x in the same run)."""
    prompts: str | None = None
    """convert: JSONL prompt file whose prompts the target answers to make the training data;
    empty uses the packaged training prompts."""
    num_prompts: int = Field(48, ge=1, le=100_000)
    """convert: prompts answered (greedy) for the training data."""
    answer_tokens: int = Field(128, ge=8, le=8192)
    """convert: tokens per answer."""

    @field_validator("choices")
    @classmethod
    def _tree(cls, choices: list[list[int]] | None) -> list[list[int]] | None:
        if choices is None:
            return None
        paths = {tuple(path) for path in choices}
        if not paths or any(not path or min(path) < 0 for path in paths):
            raise ValueError("speculative.medusa.choices: need non-empty paths of non-negative ranks, "
                             "like [[0], [0, 0], [1]]")
        orphan = next((list(p) for p in sorted(paths) if len(p) > 1 and p[:-1] not in paths), None)
        if orphan is not None:
            raise ValueError(f"speculative.medusa.choices: {orphan} has no parent path {orphan[:-1]}; "
                             "list every prefix")
        return choices

    def tree(self, num_heads: int) -> list[list[int]]:
        """The draft tree for `num_heads` heads (the configured choices, else the default)."""
        return [list(p) for p in self.choices] if self.choices else default_choices(num_heads)
