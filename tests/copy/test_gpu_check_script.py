"""kernels/gpu_check.sh on a bare box: a plain copy of the repository and an interpreter with only torch and Triton.

The box is built here: the needed folders copied to a tmp dir (no install, so no `toolkit._kernels` mapping), and
this venv's Python run with `-S` (no site-packages, no .pth files, so no editable-install finder either) and
PYTHONPATH at the copy plus a folder holding links to torch, Triton and what they import, and nothing else (no
pytest). Without a GPU the check must stop at its preflight with one line, not at an import error; the pieces it
runs after the preflight (imports from the source tree, the plain runner, the report) are checked here directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_COPIED = ("toolkit", "kernels", "tests/copy", "setup.py", "pyproject.toml")
_SKIPPED_MODULES = ("_distutils_hack", "toolkit")


def _torch_only_site(folder: Path) -> Path:
    """Links to the top-level modules importing torch and triton loads from site-packages (and their .libs)."""
    site = Path(sysconfig.get_paths()["purelib"])
    probe = (
        "import sys, torch, triton; print('\\n'.join(sorted({m.split('.')[0] for m, mod in sys.modules.items()"
        f" if (getattr(mod, '__file__', None) or '').startswith({str(site)!r})}})))"
    )
    names = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    folder.mkdir()
    for name in names:
        if name.startswith("__editable__") or name in _SKIPPED_MODULES:
            continue
        for entry in [
            site / name,
            site / f"{name}.py",
            site / f"{name}.libs",
            *site.glob(f"{name}.*.so"),
            *site.glob(f"{name}-*.dist-info"),
        ]:
            if entry.exists() and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    assert (folder / "torch").exists() and not (folder / "pytest").exists(), sorted(p.name for p in folder.iterdir())
    return folder


@pytest.fixture(scope="module")
def bare_box(tmp_path_factory):
    root = tmp_path_factory.mktemp("bare")
    repo = root / "repo"
    for item in _COPIED:
        source, target = REPO / item, repo / item
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    site = _torch_only_site(root / "site")
    python = root / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "PYTHONPATH": f"{repo}:{site}",
        "KVTK_CACHE_DIR": str(root / "cache"),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return repo, python, env


def _run(box, args, **extra_env):
    repo, python, env = box
    return subprocess.run(args, cwd=repo, env={**env, **extra_env}, capture_output=True, text=True, timeout=300)


def test_the_check_fails_at_its_preflight_with_one_line_not_an_import_error(bare_box, tmp_path):
    repo, python, _ = bare_box
    out = tmp_path / "out"
    result = _run(bare_box, ["bash", str(repo / "kernels" / "gpu_check.sh")], PY=str(python), OUT=str(out))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert (result.stdout + result.stderr).strip() == "no CUDA device visible", (result.stdout, result.stderr)
    recorded = json.loads((out / "gpu_check.json").read_text())
    env = recorded["env"]
    assert recorded["preflight"] == "no CUDA device visible" and env["cuda_available"] is False
    assert env["torch"][0].isdigit() and env["triton"][0].isdigit() and env["pytest"].startswith("unavailable")
    assert env["python_include_dir"] and "python_h" in env and "c_compiler" in env
    # The driver is missing (no GPU here), not the toolkit: the copy package imported from the plain copy.
    assert "CudaDriverError" in env["driver_cuda_version"] and "toolkit" not in env["driver_cuda_version"]
    assert not (out / "gpu_tests.log").exists()  # nothing ran after the preflight


def test_a_plain_copy_finds_its_kernels_in_the_source_tree(bare_box):
    script = """
import importlib.util, torch
assert importlib.util.find_spec("pytest") is None
import toolkit.copy
from toolkit.copy import kernel_sources
from toolkit.copy.native import load_native_copy
from toolkit.copy.triton_backend import TritonCopyBackend, load_kernel_module
from toolkit.copy import RegionPair
assert not kernel_sources._mapping_installed()
assert kernel_sources.kernels_dir() == kernel_sources._source_tree_kernels(), kernel_sources.kernels_dir()
assert load_native_copy() is not None  # compiled from the copy's kernels/cpu_block_copy.c
k = load_kernel_module()
src = torch.randint(-128, 128, (5, 64), dtype=torch.int8)
a, b = torch.zeros(4, 64, dtype=torch.int8), torch.zeros(4, 64, dtype=torch.int8)
k.gather_scatter(src, a, [4, 0], [1, 3])
k.reference_gather_scatter(src, b, [4, 0], [1, 3])
assert torch.equal(a, b)
TritonCopyBackend(store_pairs=[RegionPair(name="kv", src=src, dst=a)]).close()  # its warm-up ran
print("BARE-OK")
"""
    result = _run(bare_box, [str(bare_box[1]), "-c", script], TRITON_INTERPRET="1")
    assert result.returncode == 0 and "BARE-OK" in result.stdout, result.stderr[-3000:]


def test_without_pytest_the_plain_runner_runs_the_gpu_module_and_the_report_refuses_all_skipped(bare_box, tmp_path):
    repo, python, _ = bare_box
    result = _run(
        bare_box,
        [str(python), "kernels/gpu_runner.py", "--json", str(tmp_path / "gpu_tests.json"), "tests/copy/test_gpu.py"],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "gpu_tests.json").read_text())
    assert results["runner"].endswith("(stand-in)") and results["failed"] == 0 and results["passed"] == 0
    assert results["skipped"] == len(results["tests"]) >= 9  # every parametrization, each skipped for no CUDA
    assert {t["detail"] for t in results["tests"]} == {"needs a CUDA device"}
    report = _run(bare_box, [str(python), "kernels/gpu_check.py", "report", str(tmp_path), "0", "0"])
    assert report.returncode == 1
    written = json.loads((tmp_path / "gpu_check.json").read_text())
    assert not written["ok"] and "tests: none passed" in written["problems"]
    assert written["tests"]["skipped"] == results["skipped"]


SAMPLE = """
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_fails():
    assert False, "on purpose"

def test_skips():
    pytest.skip("driver too old")

@pytest.mark.parametrize("a, b", [(1, 2), (3, 4)])
@pytest.mark.parametrize("c", ["x"])
def test_params(a, b, c):
    assert b == a + 1 and c == "x"

def test_raises():
    with pytest.raises(ValueError, match="bad"):
        raise ValueError("bad input")

@pytest.mark.gpu
def test_needs_gpu():
    raise AssertionError("must not run without CUDA")
"""


def test_the_plain_runner_counts_like_pytest(bare_box, tmp_path):
    module = tmp_path / "test_sample.py"
    module.write_text(SAMPLE)
    result = _run(
        bare_box, [str(bare_box[1]), "kernels/gpu_runner.py", "--json", str(tmp_path / "r.json"), str(module)]
    )
    assert result.returncode == 1  # one failure
    results = json.loads((tmp_path / "r.json").read_text())
    outcomes = {t["test"].split("::")[1]: t["outcome"] for t in results["tests"]}
    assert outcomes == {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_skips": "skipped",
        "test_params[x-1-2]": "passed",
        "test_params[x-3-4]": "passed",
        "test_raises": "passed",
        "test_needs_gpu": "skipped",
    }
    assert (results["passed"], results["failed"], results["skipped"]) == (4, 1, 2)


def test_the_report_reads_pytest_junit_results_and_the_built_backends(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu",
            f"--junitxml={out / 'gpu_tests.xml'}",
            "tests/copy/test_gpu.py",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    (out / "built.jsonl").write_text(json.dumps({"test": "round_trip[dma-batch]", "built": "dma-loop"}) + "\n")
    (out / "bench_cuda.json").write_text(json.dumps({"backends": {"cuda-dma": {"built": "dma-loop"}}, "rows": []}))
    report = subprocess.run(
        [sys.executable, "kernels/gpu_check.py", "report", str(out), "0", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 1, report.stderr
    written = json.loads((out / "gpu_check.json").read_text())
    assert written["tests"]["runner"] == "pytest" and written["tests"]["passed"] == 0
    assert written["tests"]["skipped"] == len(written["tests"]["results"]) >= 9
    assert written["tests"]["built"] == [{"test": "round_trip[dma-batch]", "built": "dma-loop"}]
    assert written["bench"]["backends"] == {"cuda-dma": {"built": "dma-loop"}}
    assert written["problems"] == ["tests: none passed"]
