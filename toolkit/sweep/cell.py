"""One cell, run where the executor puts it (this process or a Ray worker): an experiment or a notebook.

`run_cell(task)` never raises: it returns the outcome and the files the cell produced, as bytes, so the driver
writes the cell folder itself. That keeps a cluster without a shared file system working and lets the serial and
Ray executors share every line of the cell's code. An experiment cell runs `run_experiment` on the config
`kvtk replay --engine dry` would build (`params.build_config`); a notebook cell executes the notebook with
papermill as `kvtk notebooks -p` does and exports its HTML.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

KIND_EXPERIMENT = "experiment"
KIND_NOTEBOOK = "notebook"


def make_task(params: dict[str, Any], *, notebook: Path | None = None, timeout_s: int = 600) -> dict[str, Any]:
    """A picklable description of one cell's work."""
    task: dict[str, Any] = {"kind": KIND_EXPERIMENT, "params": params}
    if notebook is not None:
        task.update(
            kind=KIND_NOTEBOOK,
            notebook_path=str(notebook),
            notebook_text=notebook.read_text("utf-8"),
            timeout_s=timeout_s,
        )
    return task


def run_cell(task: dict[str, Any]) -> dict[str, Any]:
    # The cell's process (a Ray worker, or the serial sweep's own): set for its life on purpose, as vLLM and
    # huggingface_hub read these once at their first import (setdefault: the user's own values win).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="kvtk-cell-"))  # mkdtemp: mode 0700
    outcome: dict[str, Any] = {"ok": True, "error": "", "host": socket.gethostname(), "pid": os.getpid()}
    try:
        if task["kind"] == KIND_NOTEBOOK:
            outcome.update(_run_notebook(task, workdir))
        else:
            outcome.update(_run_experiment(task, workdir))
    except Exception as exc:  # reported to the driver, which retries the cell once or records the error
        outcome["ok"] = False
        outcome["error"] = f"{type(exc).__name__}: {_last_line(exc)}"
        outcome["traceback"] = traceback.format_exc(limit=8)
    outcome["files"] = _collect(workdir)
    outcome["elapsed_s"] = time.perf_counter() - started
    shutil.rmtree(workdir, ignore_errors=True)
    return outcome


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else ""


def _run_experiment(task: dict[str, Any], workdir: Path) -> dict[str, Any]:
    from toolkit.experiments.runner import run_experiment
    from toolkit.sweep.params import build_config

    result = run_experiment(build_config(task["params"], out=str(workdir)))
    return {"summary": result.summary}


def _run_notebook(task: dict[str, Any], workdir: Path) -> dict[str, Any]:
    from toolkit.notebooks_runner import execute_notebook, export_html

    path = Path(task["notebook_path"])
    if not path.is_file():  # a worker on another machine: the notebook travels as text
        source_dir = Path(tempfile.mkdtemp(prefix="kvtk-nb-"))
        path = source_dir / path.name
        path.write_text(task["notebook_text"], encoding="utf-8")
    ipynb = workdir / f"{path.stem}.ipynb"
    try:
        ipynb = execute_notebook(path, workdir, task["params"], timeout_s=int(task.get("timeout_s", 600)))
    finally:
        if ipynb.exists():  # the partial notebook of a failed run is kept, with its HTML, for the reader
            export_html(ipynb)
    return {}


def _collect(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            files[str(path.relative_to(root))] = path.read_bytes()
    return files
