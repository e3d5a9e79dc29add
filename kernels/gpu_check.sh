#!/usr/bin/env bash
# One prepared GPU check for the copy path. Needs torch + triton + a CUDA device; no vLLM.
# Runs the gpu-marked copy tests (DMA batched/loop and Triton round trips, the store-ordering race test, the worker
# end to end under a busy stream) and the CUDA copy benchmark, in well under 5 minutes, and writes
#   $OUT/gpu_check.json   (or ./gpu_check_out/ when OUT is unset): {"tests": {...}, "bench": {...}, "nvidia_smi": ...}
# Usage from the repository root:  bash kernels/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT_DIR=${OUT:-./gpu_check_out}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

timeout 150 "$PY" -m pytest tests/copy/test_gpu.py -q -m gpu -p no:cacheprovider --junitxml="$OUT_DIR/gpu_tests.xml" \
  >"$OUT_DIR/gpu_tests.log" 2>&1
TESTS_RC=$?
timeout 120 "$PY" -m toolkit.bench.copy_cli --device cuda --json --repeats 5 >"$OUT_DIR/bench_cuda.json" \
  2>"$OUT_DIR/bench_cuda.log"
BENCH_RC=$?
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader \
  >"$OUT_DIR/nvidia_smi.txt" 2>&1 || true

"$PY" - "$OUT_DIR" "$TESTS_RC" "$BENCH_RC" <<'PYEOF'
import json, sys, pathlib
out, tests_rc, bench_rc = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
try:
    bench = json.loads((out / "bench_cuda.json").read_text())
except Exception as exc:
    bench = {"error": repr(exc)}
log = (out / "gpu_tests.log").read_text(errors="replace")
result = {"tests": {"rc": tests_rc, "summary": log.strip().splitlines()[-1] if log.strip() else ""},
          "bench": {"rc": bench_rc, **bench},
          "nvidia_smi": (out / "nvidia_smi.txt").read_text(errors="replace").strip()}
(out / "gpu_check.json").write_text(json.dumps(result, indent=1))
print(json.dumps({"tests": result["tests"], "bench_rc": bench_rc}))
PYEOF
exit $(( TESTS_RC != 0 || BENCH_RC != 0 ))
