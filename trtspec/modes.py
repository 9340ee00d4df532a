"""The speculative modes as one table: a row per mode, what each backend does with it.

A row names the mode's cpu-engine drafter (a `module:function` taking
trtspec.runtime.drafters.registry.DrafterParts, resolved only when an engine loads, so this
module imports nothing heavy), its spec section under `speculative` (None: only the shared
fields), and per backend one `Backing`: it runs (and how, in one line), or it is refused (why;
fix). The spec schema (mode names, backend checks, `--mode` choices), the cpu engine's drafter
choice (runtime/checkpoints.engine_parts) and the README's mode x backend table read it.

Adding a mode: a drafter module in runtime/drafters/ with a `make(parts)` function and one row
here. What the GPU builders write per mode stays in builders/ (their flags and fields are checked
against the release's contract there); the row only says whether they write anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtspec.backends import NAMES as BACKENDS  # the backend table's names, in its order


@dataclass(frozen=True)
class Backing:
    """What one backend does with a mode: runs it (`how`), or refuses it (`how`: why; fix)."""

    runs: bool
    how: str
    note: str = ""   # what README's table says after yes / refused (empty: nothing, or the reason)

    @property
    def cell(self) -> str:
        if self.runs:
            return f"yes ({self.note})" if self.note else "yes"
        return f"refused: {self.note or self.reason}"

    @property
    def reason(self) -> str:
        return self.how.partition("; ")[0]

    @property
    def fix(self) -> str:
        return self.how.partition("; ")[2]


def _yes(how: str, note: str = "") -> Backing:
    return Backing(True, how, note)


def _no(how: str, note: str = "") -> Backing:
    return Backing(False, how, note)


@dataclass(frozen=True)
class ModeRow:
    name: str
    summary: str
    drafter: str | None              # "module:function" -> a Drafter (cpu engine); None: no speculation
    section: str | None              # speculative.<section> holding the mode's own settings
    backends: dict[str, Backing] = field(default_factory=dict)
    label: str = ""                  # README's few words after the name
    trees: bool = False              # the cpu drafter grows dynamic (EAGLE-2) trees
    draft_checkpoint: bool = False   # the cpu drafter needs a draft checkpoint directory
    own_draft_cap: bool = False      # speculative.<section>.max_draft_len caps its drafts, not speculative.max_draft_len


_D = "trtspec.runtime.drafters"
MODES: dict[str, ModeRow] = {row.name: row for row in (
    ModeRow("eagle3", "EAGLE-3 head (trained by convert, or imported)", f"{_D}.registry:eagle3", "eagle3", {
        "cpu": _yes("EAGLE-3 head drafter (chains, eagle_choices or dynamic trees)"),
        "trtllm": _yes("speculative_config decoding_type Eagle with the head"),
        "trtllm-engine": _no("EAGLE-3 needs the LLM-API backend; use build.backend: trtllm",
                             "EAGLE-3 needs the LLM-API backend"),
    }, trees=True, draft_checkpoint=True),
    ModeRow("draft-target", "a smaller model with the target's tokenizer", f"{_D}.registry:draft_target", None, {
        "cpu": _yes("draft model on its own paged cache"),
        "trtllm": _yes("speculative_config decoding_type DraftTarget"),
        "trtllm-engine": _yes("--speculative_decoding_mode draft_tokens_external; BLS drafts",
                              "BLS; non-streaming, as upstream"),
    }, trees=True, draft_checkpoint=True),
    ModeRow("ngram", "prompt lookup: the continuation of an earlier n-gram", f"{_D}.registry:ngram", None, {
        "cpu": _yes("n-gram lookup"),
        "trtllm": _yes("speculative_config decoding_type NGram"),
        "trtllm-engine": _no("n-gram lookup is served by the LLM-API backend; use build.backend: trtllm",
                             "served by the LLM API"),
    }, label="prompt lookup"),
    # TensorRT-LLM 1.2.1 has no suffix decoding (its build refuses it: builders.trtllm.refuse_unmapped);
    # the 1.3 line's suffix automaton (SADecodingConfig, decoding_type SA) serves it on Dynamo targets
    ModeRow("suffix", "suffix trees over the request and earlier responses, drafts scored by frequency",
            f"{_D}.suffix:make", "suffix", {
                "cpu": _yes("per-request and global suffix tries (bounded, FIFO eviction); chains or trees "
                            "sized by the match length"),
                "trtllm": _yes("TensorRT-LLM 1.3's suffix automaton (speculative_config decoding_type SA) on "
                               "Dynamo targets; TensorRT-LLM 1.2.1 has none and its build refuses it",
                               "Dynamo targets: TensorRT-LLM 1.3's suffix automaton, SA; 1.2.1 has none"),
                "trtllm-engine": _no("TensorRT-LLM 1.2.1 has no suffix decoding for TensorRT engines either; "
                                     "use mode ngram on build.backend: trtllm, or build.backend: cpu",
                                     "no suffix decoding in TensorRT-LLM 1.2.1"),
            }, label="SuffixDecoding", own_draft_cap=True),
    ModeRow("lookahead", "Jacobi guesses and an n-gram pool (window W, n-gram N, verification set G)",
            f"{_D}.lookahead:make", "lookahead", {
                "cpu": _yes("n-gram pool from the sequence and the target's Jacobi guesses, chain drafts"),
                "trtllm": _no("TensorRT-LLM's LookaheadDecodingConfig runs on its TensorRT backend only "
                              "(supports_backend refuses pytorch), which the LLM-API package targets; "
                              "use build.backend: trtllm-engine", "TensorRT backend only upstream"),
                "trtllm-engine": _yes("--speculative_decoding_mode lookahead_decoding, "
                                      "--max_draft_len (N-2 if N>1 else 0) + (W-1+G)(N-1); "
                                      "decoding_mode lookahead and lookahead_* parameters",
                                      "`lookahead_decoding`, max_draft_len from W, N, G"),
            }, label="Jacobi + n-gram pool"),
    ModeRow("layerskip", "self-speculation: the target's first E layers, its norm and head",
            f"{_D}.layerskip:make", "layerskip", {
                "cpu": _yes("the target's first exit_layer layers draft in its own cache, no second model; "
                            "verification starts their rows at the exit layer where that is exact"),
                # TensorRT-LLM has no early-exit drafting: convert writes the first E layers as a draft
                # model (convert/first_layers.py) and the build writes draft-target with it
                "trtllm": _yes("as draft-target: speculative_config decoding_type DraftTarget with convert's "
                               "first-E-layers copy of the target", "as draft-target with a first-E-layers copy"),
                "trtllm-engine": _yes("as draft-target: draft_tokens_external with convert's first-E-layers copy "
                                      "of the target as the draft engine; BLS drafts",
                                      "as draft-target with a first-E-layers copy; BLS"),
            }, label="the target's first layers"),
    ModeRow("medusa", "Medusa heads on the target's last hidden state (trained by convert, or imported)",
            f"{_D}.medusa:make", "medusa", {
                "cpu": _yes("the heads' top tokens as a static tree (medusa choices), verified in one pass"),
                # MedusaDecodingConfig.supports_backend: not pytorch (contract llm_api.tensorrt_backend_only)
                "trtllm": _no("TensorRT-LLM's MedusaDecodingConfig runs on its TensorRT backend only "
                              "(supports_backend refuses pytorch), which the LLM-API package targets; "
                              "use build.backend: trtllm-engine", "TensorRT backend only upstream"),
                "trtllm-engine": _yes("examples/medusa/convert_checkpoint.py (FP8: quantize.py --medusa_model_dir), "
                                      "--speculative_decoding_mode medusa, "
                                      "--max_draft_len = the tree's nodes; Triton medusa_choices",
                                      "`medusa`, medusa_choices filled"),
            }, label="heads on the last hidden state", draft_checkpoint=True),
    ModeRow("mtp", "the checkpoint's own multi-token-prediction module (DeepSeek-V3/R1, GLM-4.5)",
            f"{_D}.mtp:make", "mtp", {
                "cpu": _yes("the target's MTP module (read from its safetensors) drafts chains on its own cache"),
                "trtllm": _yes("speculative_config decoding_type MTP, num_nextn_predict_layers",
                               "`MTP`, the checkpoint's own layers"),
                # trtllm-build --speculative_decoding_mode: draft_tokens_external, lookahead_decoding,
                # medusa, explicit_draft_tokens, eagle (contract trtllm_build; tensorrt_llm/commands/build.py)
                "trtllm-engine": _no("TensorRT engines have no MTP path (trtllm-build's --speculative_decoding_mode "
                                     "has none; MTP runs on the PyTorch backend); use build.backend: trtllm",
                                     "no TensorRT-engine MTP upstream"),
            }, label="the checkpoint's MTP layers"),
    ModeRow("none", "baseline: plain decoding", None, None, {
        "cpu": _yes("plain decoding"), "trtllm": _yes("no speculative_config"), "trtllm-engine": _yes("no draft"),
    }, label="baseline"),
)}

NAMES: tuple[str, ...] = tuple(MODES)


def row(mode: str) -> ModeRow:
    return MODES[mode]


def backend_modes(backend: str) -> tuple[str, ...]:
    """The modes `backend` runs, in table order."""
    return tuple(name for name, r in MODES.items() if r.backends[backend].runs)


def refusal(backend: str, mode: str) -> str | None:
    """Why `backend` refuses `mode` ("reason; fix"), or None where it runs it."""
    backing = MODES[mode].backends[backend]
    return None if backing.runs else backing.how


def draft_cap_field(mode: str) -> str:
    """The spec field that caps `mode`'s drafts: its section's own max_draft_len (suffix: upstream
    runs it at a higher cap, as the match length keeps drafts short), else the shared one."""
    r = MODES[mode]
    return f"speculative.{r.section}.max_draft_len" if r.own_draft_cap else "speculative.max_draft_len"


def tree_modes() -> tuple[str, ...]:
    return tuple(name for name, r in MODES.items() if r.trees)


def comment_rows() -> list[str]:
    """One line per mode for `trtspec init`'s commented spec: what each backend does with it."""
    return [f"{name}: " + "; ".join(f"{k} {r.backends[k].cell}" for k in BACKENDS) for name, r in MODES.items()]


def markdown_table() -> str:
    """The mode x backend table (README.md carries it; tests/test_modes.py keeps them equal)."""
    lines = ["| mode | `cpu` (embedded default) | `trtllm` (GPU default, LLM API) | `trtllm-engine` (legacy "
             "TensorRT engines) |", "|---|" + "---|" * len(BACKENDS)]
    for name, r in MODES.items():
        label = f" ({r.label})" if r.label else ""
        lines.append(f"| `{name}`{label} | " + " | ".join(r.backends[k].cell for k in BACKENDS) + " |")
    return "\n".join(lines)
