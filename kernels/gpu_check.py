"""The Python half of kernels/gpu_check.sh: the preflight before anything runs, and the report after.

    python kernels/gpu_check.py preflight OUT_DIR    exit 2 with one line when the check cannot produce data
    python kernels/gpu_check.py report OUT_DIR TESTS_RC BENCH_RC

`preflight` records the environment in OUT_DIR/env.json (Python and its include dir, whether Python.h is there,
the C compiler, torch and its CUDA build, Triton, the driver's CUDA version, pytest) and fails loudly, with the
single line "no CUDA device visible", when torch sees no device: every gpu-marked test would otherwise be skipped
and a test run that skipped everything exits 0. A missing compiler or Python.h only warns: the DMA tests still
produce data, and the Triton tests then fail and say why.

`report` merges env.json, the test results (pytest's JUnit XML, or kernels/gpu_runner.py's JSON), the backends each
test built (OUT_DIR/built.jsonl, written by the tests) and the copy benchmark's JSON into OUT_DIR/gpu_check.json,
and exits non-zero when a test failed, no test passed, or the benchmark failed.
Needs only the standard library, torch, and the repository on PYTHONPATH; never an installed toolkit.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import warnings
import xml.etree.ElementTree as ElementTree
from pathlib import Path

NO_DEVICE = "no CUDA device visible"


def _first_line(command: list[str]) -> str | None:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def _version_or_error(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception as exc:  # recorded, not raised: the report says what was missing
        return f"unavailable: {type(exc).__name__}: {exc}"


def environment() -> dict:
    include = sysconfig.get_paths().get("include", "")
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    env = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "python_include_dir": include,
        "python_h": (Path(include) / "Python.h").is_file(),
        "c_compiler": compiler,
        "c_compiler_version": _first_line([compiler, "--version"]) if compiler else None,
        "torch": _version_or_error("torch"),
        "triton": _version_or_error("triton"),
        "pytest": _version_or_error("pytest"),
    }
    try:
        import torch

        env["torch_cuda_build"] = torch.version.cuda
        with warnings.catch_warnings():  # a driver-less CUDA build warns here; the preflight line says it all
            warnings.simplefilter("ignore")
            env["cuda_available"] = torch.cuda.is_available()
        if env["cuda_available"]:
            env["device"] = torch.cuda.get_device_name(0)
            env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    except Exception as exc:
        env["cuda_available"] = False
        env["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from toolkit.copy.cuda_driver import driver_calls

        calls = driver_calls()
        env["driver_cuda_version"] = calls.version()
        env["driver_has_memcpy_batch"] = calls.memcpy_batch_async is not None
    except Exception as exc:
        env["driver_cuda_version"] = f"unavailable: {type(exc).__name__}: {exc}"
    return env


def preflight(out: Path) -> int:
    env = environment()
    (out / "env.json").write_text(json.dumps(env, indent=1))
    if not env["cuda_available"]:
        (out / "gpu_check.json").write_text(json.dumps({"preflight": NO_DEVICE, "env": env}, indent=1))
        print(NO_DEVICE, file=sys.stderr)
        return 2
    if not env["c_compiler"] or not env["python_h"]:
        print(
            f"warning: Triton's first launch needs a C compiler ({env['c_compiler']}) and Python.h in "
            f"{env['python_include_dir']} ({env['python_h']}); the Triton tests will fail",
            file=sys.stderr,
        )
    return 0


def _junit_results(path: Path) -> dict:
    tests = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, detail = "failed", (child.get("message") or "")[:2000]
            elif child.tag == "skipped":
                outcome, detail = "skipped", child.get("message") or ""
        tests.append(
            {
                "test": f"{case.get('classname')}::{case.get('name')}",
                "outcome": outcome,
                "seconds": float(case.get("time") or 0),
                "detail": detail,
            }
        )
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "skipped")}
    return {"runner": "pytest", **counts, "tests": tests}


def test_results(out: Path) -> dict:
    if (out / "gpu_tests.xml").is_file():
        return _junit_results(out / "gpu_tests.xml")
    if (out / "gpu_tests.json").is_file():
        return json.loads((out / "gpu_tests.json").read_text())
    return {"runner": None, "passed": 0, "failed": 0, "skipped": 0, "tests": [], "error": "no test results"}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except Exception as exc:
        return {"error": f"{path.name}: {type(exc).__name__}: {exc}"}


def report(out: Path, tests_rc: int, bench_rc: int) -> int:
    tests = test_results(out)
    built = []
    if (out / "built.jsonl").is_file():
        built = [json.loads(line) for line in (out / "built.jsonl").read_text().splitlines() if line.strip()]
    bench = _read_json(out / "bench_cuda.json")
    smi = out / "nvidia_smi.txt"
    problems = []
    if tests["failed"] or tests_rc not in (0, 5):
        problems.append(f"tests: {tests['failed']} failed (exit {tests_rc})")
    if tests["passed"] == 0:
        problems.append("tests: none passed")
    if bench_rc != 0:
        problems.append(f"bench: exit {bench_rc}")
    result = {
        "ok": not problems,
        "problems": problems,
        "env": _read_json(out / "env.json"),
        "tests": {
            "rc": tests_rc,
            **{k: tests.get(k) for k in ("runner", "passed", "failed", "skipped")},
            "results": tests["tests"],
            "built": built,
        },
        "bench": {"rc": bench_rc, **bench},
        "nvidia_smi": smi.read_text(errors="replace").strip() if smi.is_file() else None,
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))
    print(
        json.dumps(
            {
                "ok": result["ok"],
                "problems": problems,
                "tests": {k: tests.get(k) for k in ("runner", "passed", "failed", "skipped")},
                "bench_backends": bench.get("backends"),
            }
        )
    )
    return 0 if not problems else 1


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "preflight":
        return preflight(Path(argv[1]))
    if len(argv) == 4 and argv[0] == "report":
        return report(Path(argv[1]), int(argv[2]), int(argv[3]))
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 64


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
