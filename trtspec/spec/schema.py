"""The trtspec spec: one validated description of the whole pipeline.

`validate_spec()` validates once, at the boundary (`trtspec.spec.loading.load_spec` reads the YAML and
calls it), and turns every pydantic problem into one `field.path: problem (got value); fix` line inside a
SpecError (trtspec.spec.checks writes the lines; an unknown key names the closest real one). Deeper code
trusts the Spec it is given. Checks that need the model itself (tp_size dividing the KV heads) live with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from trtspec import modes
from trtspec.errors import SpecError
from trtspec.spec.checks import format_problem, problem_line
from trtspec.spec.eagle3_training import Eagle3Training
from trtspec.spec.medusa import MedusaSpec
from trtspec.spec.methods import LayerSkipSpec, LookaheadSpec, MtpSpec
from trtspec.spec.section import Section
from trtspec.spec.serve import ServeSpec
from trtspec.spec.suffix import SuffixSpec

DEFAULT_CONFIG = "trtspec.yaml"

Mode = Literal[modes.NAMES]  # type: ignore[valid-type]  # the rows of trtspec.modes
Backend = Literal["cpu", "trtllm", "trtllm-engine"]

# Modes each backend can serve, and why it refuses the others ("reason; fix"): trtspec.modes' table.
BACKEND_MODES: dict[str, tuple[str, ...]] = {backend: modes.backend_modes(backend) for backend in modes.BACKENDS}
BACKEND_REFUSALS: dict[tuple[str, str], str] = {(b, m): modes.refusal(b, m) or "" for b in modes.BACKENDS
                                                for m in modes.NAMES if modes.refusal(b, m)}


class ModelSpec(Section):
    source: str = "smollm2"
    """Target model: a Hugging Face directory, a hub id (org/name[@revision]; HF_HOME and
    HF_HUB_OFFLINE honoured), a .gguf file, or the alias `smollm2`."""
    name: str | None = None
    """Short name used in artifact paths; derived from the source when empty."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype for calibration and, on the cpu backend, for its linear layers: float32 (greedy
    answers bit for bit transformers' float32 ones), or bfloat16 (CPUs with AVX512_BF16: weights and
    each layer's input rounded to bfloat16, sums, norms, attention and the KV cache in float32;
    SmolLM2 served 1.4-1.5x the tokens/s at up to 8 requests on a 2-core AVX-512 EPYC, and 4 of 15
    held-back answers parted from float32's within 64 tokens; docs/BENCHMARKS-log.md). float16:
    trtllm backends only."""
    trust_remote_code: bool = False
    """Allow custom modelling code from the checkpoint. Off unless you trust the source."""


class TreeSpec(Section):
    """A dynamic (EAGLE-2) draft tree, grown per sequence and step from the drafter's own scores.

    The defaults (topk 4, depth 3, 8 nodes) are the fastest shape measured on the cpu engine at
    concurrency 1 with both 15-minute SmolLM2 heads (docs/BENCHMARKS-log.md): 1.20x and 1.27x plain
    decoding in process, where 4,4,16 gave 0.99x and 1.06x (a verified node costs ~1 ms of CPU
    compute past ~16 rows); a GPU verifies wider trees nearly free."""

    topk: int = Field(4, ge=1, le=64)
    """Children per expanded node, and nodes expanded per depth (SGLang --speculative-eagle-topk,
    EAGLE top_k, TensorRT-LLM dynamic_tree_max_topK)."""
    depth: int = Field(3, ge=1, le=16)
    """Levels of the tree: the longest path it can accept (SGLang --speculative-num-steps, EAGLE
    depth + 1, TensorRT-LLM max_draft_len)."""
    num_draft_tokens: int = Field(8, ge=1, le=512)
    """Best-scored nodes verified per sequence and step, the root not counted (SGLang
    --speculative-num-draft-tokens - 1, EAGLE total_token - 1, TensorRT-LLM max_total_draft_tokens)."""
    min_path_prob: float = Field(0.0, ge=0.0, lt=1.0)
    """Of those, verify only the nodes whose path's draft probability is at least this (the best
    node always; trees from draft_len_schedule too; cpu engine only, TensorRT-LLM has no such
    setting): each node verified on a CPU costs compute, and with 0.05 an 8,4,16 tree ran 1.19x
    plain decoding instead of 1.06x (docs/BENCHMARKS-log.md). 0: all of them."""

    @model_validator(mode="after")
    def _check_budget(self) -> TreeSpec:
        candidates = self.topk + (self.depth - 1) * self.topk * self.topk
        if not self.depth <= self.num_draft_tokens <= candidates:
            raise ValueError(problem_line(
                "speculative.tree.num_draft_tokens", f"must lie between depth ({self.depth}) and the {candidates} "
                f"candidates that topk {self.topk} and depth {self.depth} score", got=self.num_draft_tokens,
                fix="verify fewer nodes or raise topk/depth"))
        return self


TREE_MODES = modes.tree_modes()  # the drafters that grow dynamic trees (cpu engine)


def _tree_rows_problems(schedule: list[list[int]], mode: str, eagle_choices: Any) -> list[str]:
    """Dynamic-tree rows of a draft_len_schedule: EAGLE-3 or a draft model, no static tree beside
    them, each shape usable (TreeSpec's checks)."""
    problems = []
    if mode not in TREE_MODES or eagle_choices:
        problems.append(problem_line("speculative.draft_len_schedule", "tree rows [batch_size, topk, depth, "
                                     "num_draft_tokens] need mode eagle3 or draft-target and no eagle_choices",
                                     got=schedule))
    for row in (r for r in schedule if len(r) == 4):
        try:
            TreeSpec(topk=row[1], depth=row[2], num_draft_tokens=row[3])
        except ValidationError as error:
            problem = error.errors()[0]["msg"].removeprefix("Value error, ").removeprefix("speculative.tree.")
            problems.append(f"speculative.draft_len_schedule: row {row}: {problem}")
    return problems


class SpeculativeSpec(Section):
    mode: Mode = "ngram"
    """A row of trtspec.modes (none: baseline, no speculation); what each backend does: README.md's table."""
    max_draft_len: int = Field(4, ge=1, le=64)
    """Most draft tokens proposed per step; engines are built for this many. Mode suffix has its
    own cap instead, speculative.suffix.max_draft_len (24, upstream's)."""
    draft: str | None = None
    """Draft model source for draft-target mode (HF directory, hub id, .gguf, or alias)."""
    ngram_min: int = Field(2, ge=1, le=16)
    """Shortest suffix n-gram to look up in the prompt and generated text. 2 rather than 1: a
    one-token match proposes mostly wrong drafts (docs/BENCHMARKS-engine.md, --replay)."""
    ngram_max: int = Field(3, ge=1, le=16)
    """Longest suffix n-gram to look up (tried first)."""
    dynamic_draft: bool = False
    """Grow the draft after full acceptance, shrink it after a rejection."""
    confidence_threshold: float = Field(0.0, ge=0.0, lt=1.0)
    """Stop drafting when the drafter's probability of its token drops below this (0 = never)."""
    acceptance_floor: float = Field(0.0, ge=0.0, le=1.0)
    """Fall back to plain decoding while measured acceptance stays below this rate (0 = never)."""
    eagle_choices: list[list[int]] | None = None
    """Static EAGLE-3 draft tree as index paths, like TensorRT-LLM's eagle_choices; empty is a chain."""
    tree: TreeSpec | None = None
    """eagle3 or draft-target: a dynamic (EAGLE-2) draft tree, {topk, depth, num_draft_tokens},
    instead of chains or eagle_choices. The cpu engine grows one per sequence and step (or a chain,
    or nothing, where its cost model says that pays more under the load); for EAGLE-3, GPU releases
    without dynamic trees on the LLM API get a chain (the build says why); draft-model trees are
    cpu only."""
    draft_len_schedule: list[list[int]] | None = None
    """cpu backend: draft length by load, as [[batch_size, draft_len], ...]: from that many running
    sequences on, draft that many tokens per sequence (0 turns speculation off). `trtspec tune
    --concurrency 1,2,4,8` measures and writes it; empty: a cost-model default. trtllm backend on
    TensorRT-LLM 1.2.1 (draft-target, ngram): written as the LLM API's draft_len_schedule
    ({batch_size: draft_len}); `trtspec tune --url` measures it through the server."""
    acceptance_window: int = Field(0, ge=0, le=100_000)
    """trtllm backend, TensorRT-LLM 1.2.1 (draft-target, ngram): finished requests averaged by the
    release's acceptance gate (LLM API acceptance_window); 0 writes no gate. `trtspec tune --url`
    sets it with acceptance_length_threshold."""
    acceptance_length_threshold: float = Field(0.0, ge=0.0, le=65.0)
    """trtllm backend, TensorRT-LLM 1.2.1: the release switches speculation off for good once the
    rolling acceptance length (tokens per step) of the last acceptance_window requests falls below
    this (LLM API acceptance_length_threshold). `trtspec tune --url` writes the measured break-even."""
    acceptance_rate_threshold: float = Field(0.0, ge=0.0, le=1.0)
    """Dynamo targets, TensorRT-LLM 1.3 line: the release switches speculation off for good once the
    rolling acceptance rate (accepted / drafted tokens) of the last acceptance_window decoding
    iterations falls below this (LLM API acceptance_rate_threshold, acceptance_rate_window_size).
    `trtspec tune --served --target dynamo-k8s` writes the measured break-even."""
    eagle3: Eagle3Training = Field(default_factory=Eagle3Training)
    """EAGLE-3 head training settings (convert --mode eagle3)."""
    layerskip: LayerSkipSpec = Field(default_factory=LayerSkipSpec)
    """Self-speculation from the target's early layers (mode layerskip)."""
    lookahead: LookaheadSpec = Field(default_factory=LookaheadSpec)
    """Lookahead decoding: Jacobi guesses and an n-gram pool (mode lookahead)."""
    medusa: MedusaSpec = Field(default_factory=MedusaSpec)
    """Medusa heads and their draft tree (mode medusa)."""
    mtp: MtpSpec = Field(default_factory=MtpSpec)
    """The checkpoint's own multi-token-prediction modules (mode mtp)."""
    suffix: SuffixSpec = Field(default_factory=SuffixSpec)
    """Suffix decoding: suffix trees over the request and earlier responses (mode suffix)."""

    @property
    def draft_cap(self) -> int:
        """The most draft tokens the mode proposes per step (trtspec.modes.draft_cap_field): its
        section's own max_draft_len where the modes table gives it one, else max_draft_len."""
        row = modes.row(self.mode)
        if row.own_draft_cap and row.section:
            cap: int = getattr(self, row.section).max_draft_len
            return cap
        return self.max_draft_len


class QuantizationSpec(Section):
    fp8: bool = False
    """Quantize target weights (and the draft's) to FP8 with ModelOpt PTQ."""
    fp8_kv_cache: bool = False
    """Store the KV cache in FP8 (GPU backends)."""
    calibration_prompts: str | None = None
    """JSONL prompt file for calibration; empty uses the set shipped in the package."""
    calibration_size: int = Field(32, ge=1, le=100_000)
    """Number of calibration prompts."""


class BuildSpec(Section):
    backend: Backend = "cpu"
    """cpu (trtspec's PyTorch engine) | trtllm (LLM API, GPU) | trtllm-engine (legacy TensorRT engines)."""
    output_dir: str = "engines"
    """Directory that holds one subdirectory per built engine."""
    max_batch_size: int = Field(8, ge=1, le=4096)
    """Most requests batched in flight."""
    max_input_len: int = Field(1024, ge=1)
    """Longest prompt in tokens."""
    max_seq_len: int = Field(2048, ge=2)
    """Longest prompt plus output in tokens."""
    max_num_tokens: int = Field(8192, ge=1)
    """Most tokens in one engine step across the batch."""
    max_prefill_tokens: int | None = Field(None, ge=1)
    """cpu backend: most prompt tokens one engine step prefills across the batch, in chunks and in
    arrival order, beside the running sequences' decode and draft rows (which it never cuts, unlike
    max_num_tokens), so prompts arriving together get their first tokens one after another instead
    of all after one long prefill. Empty: what max_num_tokens leaves. GPU backends ignore it
    (TensorRT-LLM chunks context under max_num_tokens)."""
    tokens_per_block: int = Field(32, ge=1)
    """Paged KV cache block size in tokens (a power of two)."""
    tp_size: int = Field(1, ge=1, le=64)
    """Tensor-parallel GPUs."""
    pp_size: int = Field(1, ge=1, le=64)
    """Pipeline-parallel GPUs."""
    gpu: Literal["h100", "h200"] = "h100"
    """GPU the memory planner plans for."""
    free_gpu_memory_fraction: float = Field(0.9, gt=0, le=1)
    """Share of free GPU memory given to the KV cache."""
    kv_cache_max_tokens: int | None = Field(None, ge=1)
    """cpu backend: token slots in the paged KV cache pool (whole tokens_per_block blocks); requests
    wait for blocks beyond it. Empty: room for max_batch_size sequences of max_seq_len."""
    kv_cache_reuse: bool = True
    """cpu backend: prefill the prompt start every chat request shares (the chat template's system
    part) once and copy its keys and values into each request, and keep prompts after their
    prefill so that a later prompt beginning the same way (a system prompt, earlier turns) copies
    what they share: exact, less prefill under load. GPU backends ignore it: TensorRT-LLM's own
    block reuse is set by builders/trtllm.py (on, off for EAGLE-3 as ModelOpt's recipe says) and
    enable_kv_cache_reuse by the trtllm-engine repository."""
    kv_cache_reuse_mib: int = Field(256, ge=0, le=1 << 20)
    """cpu backend: memory for the prompts kept for reuse, MiB (the least recently used leaves
    first; SmolLM2 keeps 46 KiB per prompt token); 0 keeps only the shared chat start."""
    adapt_threads: bool = True
    """cpu backend: while other processes compute on the engine's cores (a build, a second server),
    step on fewer threads, and on all again once they are free: a 2-thread team whose threads wait
    off their cores decoded 13x slower beside one busy process, one thread 4 % slower. Only where
    the target computes the same numbers at any thread count (the row and attention kernels), so
    it never changes a token. GPU backends ignore it."""
    guided_decoding_backend: Literal["xgrammar", "llguidance"] | None = None
    """trtllm backend: the grammar backend the LLM API loads (its guided_decoding_backend), so that
    requests may carry a JSON schema, tool calls or a grammar (trtllm-serve's response_format);
    allowed with every LLM-API mode at TensorRT-LLM 1.2.1 (contract llm_api.guided_decoding). Empty:
    none, and such requests are refused. The cpu engine always has its grammar (xgrammar)."""
    trtllm_version: Literal["1.1.0", "1.2.1"] = "1.2.1"
    """GPU backends: the TensorRT-LLM release the artifacts are written for (its contract:
    trtspec/builders/contract_data/). 1.2.1 is what the Dockerfile's container (26.07, the newest
    trtllm-python-py3) carries, as 26.04-26.06 do; 1.1.0 is in 25.12-26.02."""
    prepack: bool = True
    """cpu backend: run the linear layers on the row kernel (AVX2 dot products in a fixed order,
    built with g++ on first use) or, where it cannot be built, on oneDNN-prepacked weights
    (multi-token verify passes cost far less); per layer on oneDNN or MKL where its rows round alike
    and it is clearly faster on the CPU at hand (chosen at load, first timings kept in
    $TRTSPEC_CACHE/linear-timings.json). false keeps plain nn.Linear. Other backends ignore it."""

    @model_validator(mode="after")
    def _check_lengths(self) -> BuildSpec:
        problems = []
        if self.max_input_len >= self.max_seq_len:
            problems.append(f"build.max_input_len: must be less than build.max_seq_len "
                            f"({self.max_seq_len}) (got {self.max_input_len})")
        if self.tokens_per_block & (self.tokens_per_block - 1):
            problems.append(f"build.tokens_per_block: must be a power of two (got {self.tokens_per_block})")
        if problems:
            raise ValueError("\n".join(problems))
        return self


class BenchSpec(Section):
    prompts: str | None = None
    """JSONL prompt file ({"category", "prompt"} per line); empty uses the set shipped in the package."""
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4])
    """Concurrent request counts to measure."""
    max_tokens: int = Field(128, ge=1)
    """New tokens per request."""
    num_prompts: int | None = Field(None, ge=1)
    """Use only the first N prompts; empty uses all."""

    @model_validator(mode="after")
    def _positive_concurrency(self) -> BenchSpec:
        bad = [c for c in self.concurrency if c < 1]
        if not self.concurrency or bad:
            raise ValueError(f"bench.concurrency: must be a non-empty list of positive integers (got {self.concurrency})")
        return self


class Spec(Section):
    model: ModelSpec = Field(default_factory=ModelSpec)
    """The target model."""
    speculative: SpeculativeSpec = Field(default_factory=SpeculativeSpec)
    """How drafts are made and checked."""
    quantization: QuantizationSpec = Field(default_factory=QuantizationSpec)
    """FP8 weights and KV cache."""
    build: BuildSpec = Field(default_factory=BuildSpec)
    """Engine settings."""
    serve: ServeSpec = Field(default_factory=ServeSpec)
    """Triton server settings."""
    bench: BenchSpec = Field(default_factory=BenchSpec)
    """Benchmark settings."""
    workdir: str = "work"
    """Checkpoints, server logs and reports go here."""

    @model_validator(mode="after")
    def _check_combinations(self) -> Spec:
        problems = []
        mode, backend = self.speculative.mode, self.build.backend
        if mode not in BACKEND_MODES[backend]:
            reason, _, fix = BACKEND_REFUSALS[(backend, mode)].partition("; ")
            problems.append(problem_line("speculative.mode", f"{mode} cannot run on build.backend {backend} "
                                         f"({reason})", got=mode, fix=fix))
        if mode == "draft-target" and not self.speculative.draft:
            problems.append(problem_line("speculative.draft", "draft-target mode needs a draft model source",
                                         got="nothing", fix="set it to an HF directory, a .gguf file or an alias"))
        if self.speculative.ngram_min > self.speculative.ngram_max:
            problems.append(f"speculative.ngram_min: must not exceed speculative.ngram_max "
                            f"({self.speculative.ngram_max}) (got {self.speculative.ngram_min})")
        if backend == "trtllm-engine" and self.build.guided_decoding_backend:
            problems.append(problem_line("build.guided_decoding_backend", "an LLM-API option, which build.backend "
                                         "trtllm-engine (the legacy tensorrtllm model) does not take",
                                         got=self.build.guided_decoding_backend,
                                         fix="use build.backend: trtllm, or leave it empty"))
        if backend == "trtllm-engine" and mode != "none" and self.build.max_batch_size > 512:
            problems.append(f"build.max_batch_size: speculative TensorRT engines allow at most 512 "
                            f"(got {self.build.max_batch_size})")
        if self.speculative.tree is not None and mode not in TREE_MODES:
            problems.append(problem_line("speculative.tree", "dynamic draft trees grow from an EAGLE-3 head or a "
                                         "draft model", got=f"mode {mode}",
                                         fix="set speculative.mode: eagle3 or draft-target, or remove tree"))
        if self.speculative.tree is not None and self.speculative.eagle_choices:
            problems.append(problem_line("speculative.tree", "a dynamic tree and a static eagle_choices tree "
                                         "exclude each other", fix="keep one of them"))
        schedule = self.speculative.draft_len_schedule or []
        if any(len(row) not in (2, 4) or row[0] < 1 or min(row[1:]) < (0 if len(row) == 2 else 1) for row in schedule):
            problems.append(f"speculative.draft_len_schedule: expected [[batch_size >= 1, draft_len >= 0], ...], "
                            f"or for a dynamic tree [batch_size, topk, depth, num_draft_tokens] (got {schedule})")
        elif any(len(row) == 4 for row in schedule):
            problems.extend(_tree_rows_problems(schedule, mode, self.speculative.eagle_choices))
        if self.serve.stream_interval != 1 and backend != "cpu":
            problems.append(problem_line("serve.stream_interval", "only the cpu backend's model gathers streamed "
                                         "tokens (tensorrtllm_backend streams every step)",
                                         got=self.serve.stream_interval, fix="remove it, or set build.backend: cpu"))
        if self.model.dtype == "float16" and backend == "cpu":
            problems.append(problem_line("model.dtype", "the cpu engine runs float32 or bfloat16 linear layers",
                                         got="float16", fix="use float32 or bfloat16 with build.backend: cpu"))
        if self.quantization.fp8_kv_cache and backend == "cpu":
            problems.append(problem_line("quantization.fp8_kv_cache",
                                         "the cpu backend keeps its KV cache in the model dtype", got="true",
                                         fix="set it only for trtllm or trtllm-engine"))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def model_name(self) -> str:
        """The short model name used in artifact paths."""
        if self.model.name:
            return self.model.name
        return Path(self.model.source.rstrip("/")).name.removesuffix(".gguf").lower()


def validate_spec(data: dict[str, Any]) -> Spec:
    """Validate a plain dict into a Spec, raising SpecError with one line per problem."""
    if not isinstance(data, dict):
        raise SpecError([f"spec: the top level must be a mapping of sections (got {type(data).__name__})"])
    try:
        return Spec.model_validate(data)
    except ValidationError as error:
        lines: list[str] = []
        for problem in error.errors():
            lines.extend(format_problem(problem, Spec).splitlines())
        raise SpecError(lines) from None
