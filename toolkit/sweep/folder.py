"""The sweep folder (mode 0700, files 0600): what a sweep writes, and how a resumed one reads it back.

    spec.json          the validated spec, the expanded cells, the executor, versions (toolkit, vLLM, Ray, ...)
    cells/<cell id>/   one run folder per cell (params.json, summary.json, phases.parquet, ... or the executed
                       notebook and its HTML) plus cell.json: parameters, status, attempts, error, seconds, host
    results.parquet    one row per cell x variant x phase: the phase columns, the cell's parameters as columns
    summary.json       counts, every failed cell with its error, per-cell status (written last)
    report.html        offline report (plotly.js inlined once)

A cell is finished when its cell.json says "done"; `--resume` runs every other cell again. The folder is created
fresh (or is an empty folder of ours); `--resume` takes only a folder of ours that holds a spec.json. Files are
written to a new O_EXCL|O_NOFOLLOW temporary name and renamed into place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.private_fs import create_run_dir, make_private_dir, write_private_file, write_private_with
from toolkit.sweep.spec import Cell

STATUS_DONE = "done"
STATUS_FAILED = "failed"
STATUS_RUNNING = "running"
# Summary-level numbers of a run that are not phase columns but describe the cell's geometry.
SUMMARY_COLUMNS = (
    "model",
    "trace",
    "hash_block_tokens",
    "scheduler_block_tokens",
    "cpu_bytes",
    "cpu_blocks",
    "device_blocks",
)


def write_private(path: Path, data: bytes | str) -> Path:
    """Write a file atomically with mode 0600 (parents created owner-only)."""
    make_private_dir(path.parent)
    return write_private_file(path, data)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


class SweepFolder:
    def __init__(self, path: str | Path, *, resume: bool = False) -> None:
        path = Path(path)
        if (path / "spec.json").is_file() and not resume:
            raise BadInput(f"out: {path} already holds a sweep; pass --resume to continue it, or another --out")
        self.path = create_run_dir(path, resume=resume)  # never another user's folder, a link or a file
        if resume and any(self.path.iterdir()) and not (self.path / "spec.json").is_file():
            raise BadInput(f"out: {path} is not a sweep folder (no spec.json); --resume continues a sweep only")

    def cell_dir(self, cell: Cell) -> Path:
        return self.path / "cells" / cell.cell_id

    def read_spec(self) -> dict[str, Any] | None:
        target = self.path / "spec.json"
        return json.loads(target.read_text()) if target.exists() else None

    def write_spec(self, document: dict[str, Any]) -> None:
        write_private(self.path / "spec.json", _json(document))

    def cell_state(self, cell: Cell) -> dict[str, Any] | None:
        target = self.cell_dir(cell) / "cell.json"
        try:
            return json.loads(target.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def is_done(self, cell: Cell) -> bool:
        state = self.cell_state(cell)
        return bool(state) and state.get("status") == STATUS_DONE and state.get("key") == cell.key

    def mark_running(self, cell: Cell, attempt: int) -> None:
        errors = (self.cell_state(cell) or {}).get("errors", [])  # every failed attempt's error, kept for the reader
        self._write_state(cell, STATUS_RUNNING, attempts=attempt, errors=errors)

    def record(self, cell: Cell, outcome: dict[str, Any], *, attempts: int, final: bool) -> None:
        """Replace the cell folder's files with this attempt's, then its cell.json (written last)."""
        folder = self.cell_dir(cell)
        errors = list((self.cell_state(cell) or {}).get("errors", []))  # read before the folder is cleared
        for old in sorted(folder.rglob("*"), reverse=True) if folder.exists() else []:
            if old.is_file():
                old.unlink()
            elif old.is_dir():
                old.rmdir()
        for rel, data in outcome.get("files", {}).items():
            target = (folder / rel).resolve()
            if folder.resolve() not in target.parents:
                raise BadInput(f"cell {cell.cell_id}: refusing to write outside its folder: {rel!r}")
            write_private(target, data)
        status = STATUS_DONE if outcome["ok"] else (STATUS_FAILED if final else STATUS_RUNNING)
        if not outcome["ok"]:
            errors.append(outcome.get("error", ""))
        self._write_state(
            cell,
            status,
            attempts=attempts,
            error=outcome.get("error", ""),
            errors=errors,
            traceback=outcome.get("traceback"),
            elapsed_s=round(outcome.get("elapsed_s", 0.0), 3),
            host=outcome.get("host"),
            pid=outcome.get("pid"),
        )

    def _write_state(self, cell: Cell, status: str, **extra: Any) -> None:
        state = {
            "cell_id": cell.cell_id,
            "index": cell.index,
            "key": cell.key,
            "label": cell.label,
            "params": cell.params,
            "status": status,
            **extra,
        }
        write_private(self.cell_dir(cell) / "cell.json", _json(state))

    def results_frame(self, cells: list[Cell]):
        """One row per cell x variant x phase over the finished cells, the cell's parameters as columns."""
        import polars as pl

        parts = []
        for cell in cells:
            if not self.is_done(cell):
                continue
            folder = self.cell_dir(cell)
            for phases_path in sorted(folder.rglob("phases.parquet")):
                phases = pl.read_parquet(phases_path)
                summary_path = phases_path.parent / "summary.json"
                summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
                columns = {"cell_id": cell.cell_id, "cell_index": cell.index, "cell_label": cell.label}
                for name, value in cell.params.items():
                    column = name.replace("-", "_")
                    columns[f"param_{column}" if column in phases.columns else column] = _scalar(value)
                for name in SUMMARY_COLUMNS:
                    if name not in columns and name not in phases.columns and name in summary:
                        columns[name] = summary[name]
                parts.append(phases.with_columns(*(pl.lit(v).alias(k) for k, v in columns.items())))
        if not parts:
            return pl.DataFrame(
                {"cell_id": [], "variant": [], "phase": []},
                schema={"cell_id": pl.Utf8, "variant": pl.Utf8, "phase": pl.Utf8},
            )
        frame = pl.concat(parts, how="diagonal_relaxed")
        leading = ["cell_id", "cell_index", "cell_label"]
        return frame.select(leading + [c for c in frame.columns if c not in leading])

    def write_results(self, frame) -> Path:
        return write_private_with(self.path / "results.parquet", frame.write_parquet)

    def write_summary(self, summary: dict[str, Any]) -> Path:
        return write_private(self.path / "summary.json", _json(summary))


def _scalar(value: Any) -> Any:
    """Lists (phases, baselines) become one string so every parameter is a plain column."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value
