"""`speculative.layerskip`, `speculative.lookahead` and `speculative.mtp`: the settings of three
drafting methods that need no second model (trtspec.modes: their rows; reference
heads-and-methods.md sections 4-6)."""

from __future__ import annotations

from pydantic import Field, model_validator

from trtspec.spec.section import Section


class LayerSkipSpec(Section):
    exit_layer: int | None = Field(None, ge=1, le=1024)
    """mode layerskip: draft with the target's first exit_layer decoder layers, then its own final
    norm and lm_head (LayerSkip's --exit_layer; HF assistant_early_exit); must be below the target's
    num_hidden_layers. Empty: a quarter of the layers, at least 1 (LayerSkip's Llama 2 7B recipe
    exits at 8 of 32; `trtspec tune --mode layerskip` measures several and writes the fastest). A model not trained for early exit
    accepts few such drafts: SmolLM2 (30 layers) accepted 0.02-0.35 tokens per draft at exit_layer
    4-22 and ran 0.32-0.44x plain decoding on a 2-core Xeon (docs/BENCHMARKS-log.md, "Lookahead
    and LayerSkip"); measure yours with `trtspec bench --compare-modes all`."""


class LookaheadSpec(Section):
    window: int = Field(4, ge=1, le=64)
    """mode lookahead: W, the Jacobi window, how far ahead guesses are kept (TensorRT-LLM
    max_window_size, Triton lookahead_window_size; its default 4)."""
    ngram: int = Field(3, ge=1, le=16)
    """N, tokens per n-gram in the pool (max_ngram_size, lookahead_ngram_size; default 3)."""
    verification_set: int = Field(4, ge=0, le=64)
    """G, n-grams kept per first token and verified per step (max_verification_set_size,
    lookahead_verification_set_size; default 4)."""

    @model_validator(mode="after")
    def _legal(self) -> LookaheadSpec:
        # TensorRT-LLM's rule (executor LookaheadDecodingConfig): N == 1 means W == 1 and G == 0
        if self.ngram == 1 and (self.window != 1 or self.verification_set != 0):
            raise ValueError("speculative.lookahead: ngram 1 needs window 1 and verification_set 0 "
                             f"(got window {self.window}, verification_set {self.verification_set})")
        if self.ngram > 1 and self.verification_set == 0:
            raise ValueError("speculative.lookahead.verification_set: must be at least 1 when ngram > 1 (got 0)")
        return self

    @property
    def max_draft_len(self) -> int:
        """Draft tokens an engine is built for: (N-2 if N>1 else 0) + (W-1+G)(N-1) (TensorRT-LLM
        examples/lookahead/README.md; calculate_speculative_resource)."""
        n, w, g = self.ngram, self.window, self.verification_set
        return (n - 2 if n > 1 else 0) + (w - 1 + g) * (n - 1)


class MtpSpec(Section):
    num_layers: int | None = Field(None, ge=1, le=16)
    """mode mtp: the target checkpoint's MTP modules to draft with (`model.layers.{num_hidden_layers}`
    on). Empty: the checkpoint's num_nextn_predict_layers (the released DeepSeek-V3/R1 and GLM-4.5
    carry 1). One module is reused for every draft position, by the cpu engine and by TensorRT-LLM
    (MTP Eagle), so speculative.max_draft_len sets the draft length: the trtllm backend writes it as
    MTPDecodingConfig.num_nextn_predict_layers, the release's name for it. The cpu engine drafts
    with one module only."""
