#!/usr/bin/env bash
# One prepared GPU check for the copy path. Needs torch + triton + a CUDA device; no vLLM, no install, no pytest.
# Runs from a plain copy of the repository: PYTHONPATH points at it, and the copy backends find kernels/ beside
# toolkit/ when the package mapping (toolkit._kernels) is absent.
#   1. preflight (kernels/gpu_check.py): records torch/Triton/driver versions, the C compiler and Python's include
#      dir; exits 2 with the one line "no CUDA device visible" when torch sees no device (nothing else runs);
#   2. the gpu-marked copy tests (DMA batched/loop and Triton round trips, the store and load ordering race tests,
#      registration failures, the worker end to end under a busy stream), with pytest when it is importable, else
#      with kernels/gpu_runner.py; each test records the backend it really built;
#   3. the CUDA copy benchmark's grid (block size x block count, against vLLM's call shape; Triton required: its
#      warm-up copy must succeed), also printed as a table to bench_grid.txt;
#   4. $OUT/gpu_check.json (or ./gpu_check_out/ when OUT is unset): env, per-test outcomes and built backends,
#      passed/skipped counts, the benchmark and nvidia-smi. Exit 0 only when tests ran, none failed, and the
#      benchmark ran.
# Usage from anywhere:  bash kernels/gpu_check.sh      (PY=/path/to/python to choose the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT_DIR=${OUT:-./gpu_check_out}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

"$PY" kernels/gpu_check.py preflight "$OUT_DIR" || exit $?

export KVTK_GPU_CHECK_RECORD="$OUT_DIR/built.jsonl"
: >"$KVTK_GPU_CHECK_RECORD"
rm -f "$OUT_DIR/gpu_tests.xml" "$OUT_DIR/gpu_tests.json"
if "$PY" -c "import pytest" >/dev/null 2>&1; then
  timeout 240 "$PY" -m pytest tests/copy/test_gpu.py -q -m gpu -p no:cacheprovider -rs \
    --junitxml="$OUT_DIR/gpu_tests.xml" >"$OUT_DIR/gpu_tests.log" 2>&1
else
  timeout 240 "$PY" kernels/gpu_runner.py --json "$OUT_DIR/gpu_tests.json" tests/copy/test_gpu.py \
    >"$OUT_DIR/gpu_tests.log" 2>&1
fi
TESTS_RC=$?
# The grid: block size x blocks per batch (cells over 1 GiB skipped), each backend beside vLLM's call shape.
timeout 300 "$PY" -m toolkit.bench.copy_cli --device cuda --json --repeats 5 --require triton \
  --block-kib 4 16 64 256 1024 2048 --block-counts 16 256 1024 4096 65536 --max-grid-mib 1024 \
  >"$OUT_DIR/bench_cuda.json" 2>"$OUT_DIR/bench_cuda.log"
BENCH_RC=$?
"$PY" -m toolkit.bench.copy_cli --grid-from "$OUT_DIR/bench_cuda.json" >"$OUT_DIR/bench_grid.txt" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader \
  >"$OUT_DIR/nvidia_smi.txt" 2>&1 || true

"$PY" kernels/gpu_check.py report "$OUT_DIR" "$TESTS_RC" "$BENCH_RC"
