#!/usr/bin/env bash
# device_cpu_scaling.sh: the cpu engine's thread scaling on the device machine's 16-core CPU (issue 25).
#
# The device tool (/work/.library/device) lends some tasks a machine with 16 CPU cores beside its
# GPU: the only many-core CPU within reach. It takes at most 64 MiB from here and reaches no
# package index, so the real SmolLM2 weights cannot travel: `run` builds SmolLM2's shapes with
# seeded random weights there (scripts/random_smollm2.py; step costs do not depend on the values).
#
#   scripts/device_cpu_scaling.sh prepare   # here: .devcarry/ and .whl/ (git-ignored), about 20 MB
#   then the device tool's run, with carry [".whl", ".devcarry"] and timeout_s 600:
#     bash scripts/device_cpu_scaling.sh run
#
# `prepare` also puts the trtspec package of commit $PREVIOUS (default 878e027: oneDNN or MKL per
# layer, before the row kernel) in .devcarry/previous, the "before".
# `run` writes to $OUT (at most 8 files come back): lscpu.txt, linear.txt (benchmarks/linear_kernels.py:
# oneDNN and MKL per layer shape at 1/4/8/16 threads, times and row invariance; then
# benchmarks/linear_sequence.py: all 211 layers in sequence on the row kernel, oneDNN and MKL at 16
# threads, 1/8/64 rows), forwards.txt
# (benchmarks/decode_forward.py: engine at 1/8/16 threads and HF at 1/16, each engine line preceded by
# the kernels its layers chose; at 16 also every layer forced on oneDNN, the "before"), threads.txt
# (benchmarks/threads.py: tokens/s at 8/16 threads x batch 1/8, the previous engine the same, HF at 16;
# one round), and ceiling.txt (benchmarks/scaling_ceiling.py at 16 threads). About 9 minutes on the 16-core Xeon;
# each step has its own time limit so a slow one cannot eat the others. The device's own torch
# (2.11+cu130 when last run) is used; transformers and tokenizers travel at this venv's versions.
set -uo pipefail
cd "$(dirname "$0")/.."

prepare() {
  local cache="${TRTSPEC_CACHE:-$HOME/.cache/trtspec}/models/smollm2" file
  [ -f "$cache/config.json" ] || { echo "device_cpu_scaling: no SmolLM2 cache; run 'trtspec models fetch smollm2'" >&2; exit 2; }
  for path in /.whl/ /.devcarry/; do grep -qxF "$path" .git/info/exclude 2>/dev/null || echo "$path" >> .git/info/exclude; done
  mkdir -p .devcarry/smollm2 .whl
  for file in "$cache"/*; do  # config and tokenizer files: the weights are made there
    case "$file" in *.safetensors|*/manifest.json) ;; *) cp "$file" .devcarry/smollm2/ ;; esac
  done
  rm -rf .devcarry/previous && mkdir -p .devcarry/previous
  git archive "${PREVIOUS:-878e027}" trtspec | tar -x -C .devcarry/previous || exit 3
  local versions
  versions=$(.venv/bin/python -c "import transformers, tokenizers; print(f'transformers=={transformers.__version__} tokenizers=={tokenizers.__version__}')")
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $versions
  du -sh .devcarry .whl
}

run() {
  : "${OUT:?run this on the device machine, where OUT is set}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD TRTSPEC_CACHE=/tmp/trtspec-cache PYTHONUNBUFFERED=1
  lscpu > "$OUT/lscpu.txt"; grep -E "Model name|^CPU\(s\)" "$OUT/lscpu.txt"
  python3 -c "import torch; print('torch', torch.__version__, torch.get_num_threads(), 'threads')"
  python3 scripts/random_smollm2.py --like .devcarry/smollm2 2>/dev/null || exit 5
  local variant
  timeout 90 python3 -m benchmarks linear-kernels --threads 1,4,8,16 > "$OUT/linear.txt" 2>&1; tail -4 "$OUT/linear.txt"
  timeout 60 python3 -m benchmarks linear-sequence --threads 16 --rows 1,8,64 --rounds 3 --kernels rowdot,onednn,mkl \
    >> "$OUT/linear.txt" 2>&1; tail -5 "$OUT/linear.txt"
  for variant in "engine 1" "hf 1" "engine 8" "engine 16" "engine 16 --onednn-linear" "hf 16" "engine 16 --profile"; do
    echo "=== $variant (load $(cut -d' ' -f1 /proc/loadavg))" >> "$OUT/forwards.txt"
    # shellcheck disable=SC2086
    timeout 60 python3 -m benchmarks decode-forward $variant >> "$OUT/forwards.txt" 2>&1
    tail -1 "$OUT/forwards.txt"
  done
  timeout 220 python3 -m benchmarks threads --threads 8,16 --hf-threads 16 --rounds 1 --max-tokens 32 \
    --previous "$PWD/.devcarry/previous" > "$OUT/threads.txt" 2>&1; tail -14 "$OUT/threads.txt"
  OMP_NUM_THREADS=16 timeout 100 python3 -m benchmarks scaling-ceiling --concurrency 1,8,16 --repeats 1 \
    --requests-per-slot 4 --max-tokens 48 > "$OUT/ceiling.txt" 2>&1; tail -6 "$OUT/ceiling.txt"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
