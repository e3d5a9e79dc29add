"""The built wheel works where users install it: outside the repository, not editable.

The wheel is built from a copy of the build inputs, installed with no dependencies into a fresh virtual environment
in a temporary folder, and run from there. First bare (the core has no dependencies): `kvtk geometry`, the presets,
tiny model configs, traces and notebooks it ships. Then with this environment's torch and vLLM made visible through
a `.pth` line (the editable toolkit stays hidden: `.pth` files of a path added that way are not processed): the vLLM
adapter imports and the native CPU copy builds from the shipped C source and copies bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "toolkit", "data", "kernels", "notebooks")

pytestmark = pytest.mark.engine  # imports vLLM in a subprocess and builds a wheel: about half a minute

INSTALLED_CHECKS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import toolkit
    from toolkit.models.presets import data_dir, list_presets
    from toolkit.models import list_models
    from toolkit.notebooks_runner import list_notebooks
    shipped = sorted(str(p.relative_to(data_dir())) for p in data_dir().rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts)
    print(json.dumps({"toolkit": toolkit.__file__, "presets": list_presets(), "data_files": shipped,
                      "models": [m.name for m in list_models()],
                      "notebooks": [p.name for p in list_notebooks()],
                      "traces": sorted(p.name for p in (data_dir() / "traces").glob("*.jsonl"))}))
    """
)

NATIVE_COPY = textwrap.dedent(
    """
    import json, os
    import torch
    import toolkit.vllm
    from toolkit.copy import CpuCopyBackend, Direction, RegionPair
    from toolkit.copy.native import SOURCE, load_native_copy
    from toolkit.workloads.resolve import resolve_trace
    trace = resolve_trace("fewshot-small")
    built = load_native_copy() is not None
    src = torch.arange(8 * 256, dtype=torch.int32).view(torch.int8).view(8, -1)
    dst = torch.zeros_like(src)
    backend = CpuCopyBackend(store_pairs=[RegionPair(name="r", src=src, dst=dst)], use_native=True,
                             asynchronous=False)
    backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=[7, 2, 5], dst_block_ids=[0, 1, 6])
    backend.flush()
    ok = [o.ok for o in backend.poll()]
    backend.close()
    print(json.dumps({"vllm_adapter": toolkit.vllm.__file__, "trace_requests": len(trace.requests),
                      "source": str(SOURCE), "native_built": built,
                      "poll_ok": ok, "bytes_equal": bool(torch.equal(dst[[0, 1, 6]], src[[7, 2, 5]])),
                      "untouched_zero": bool(dst[[2, 3, 4, 5, 7]].eq(0).all()),
                      "libraries": sorted(os.listdir(os.path.join(os.environ["KVTK_CACHE_DIR"], "native")))}))
    """
)


def _run(cmd, *, cwd, env, timeout=300):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_wheel_installed_outside_the_repository_runs(tmp_path):
    src = tmp_path / "src"
    for name in BUILD_INPUTS:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(
                origin,
                src / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.ipynb", ".ipynb_checkpoints"),
            )
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(origin, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        HF_HUB_OFFLINE="1", KVTK_CACHE_DIR=str(tmp_path / "cache"), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1"
    )
    # This environment's setuptools builds it, offline (no isolated build environment to download).
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = (tmp_path / "dist").glob("hybrid_kv_toolkit-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env=env)
    python, kvtk = venv / "bin" / "python", venv / "bin" / "kvtk"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        cwd=tmp_path,
        env=env,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()

    # Bare: nothing but the wheel. The core and its shipped data need no dependency.
    geometry = _run([str(kvtk), "geometry", "--preset", "qwen3-next-80b-a3b", "--json"], cwd=work, env=env)
    assert json.loads(geometry), geometry
    found = json.loads(_run([str(python), "-c", INSTALLED_CHECKS], cwd=work, env=env))
    assert Path(found["toolkit"]).is_relative_to(venv) and not Path(found["toolkit"]).is_relative_to(REPO), found
    assert "qwen3-next-80b-a3b" in found["presets"] and "tiny-qwen3-next" in found["models"], found
    assert found["notebooks"] == sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py")), found
    assert found["traces"] == sorted(p.name for p in (REPO / "data" / "traces").glob("*.jsonl")), found
    in_repo = sorted(str(p.relative_to(src / "data")) for p in (src / "data").rglob("*") if p.is_file())
    assert found["data_files"] == in_repo, f"data/ files the wheel lacks: {set(in_repo) - set(found['data_files'])}"

    # With torch and vLLM from this environment (after the venv's own site-packages, so its toolkit wins).
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "host_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    native = json.loads(_run([str(python), "-c", NATIVE_COPY], cwd=work, env=env).strip().splitlines()[-1])
    assert Path(native["vllm_adapter"]).is_relative_to(venv) and Path(native["source"]).is_relative_to(venv), native
    assert native["trace_requests"] > 0, native
    assert native["poll_ok"] == [True] and native["bytes_equal"] and native["untouched_zero"], native
    if shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc"):
        assert native["native_built"] and native["libraries"], native
