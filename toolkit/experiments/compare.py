"""Run and sweep folders side by side: one row per (run, variant, phase), the config flattened into every row.

    rows = load_rows(["runs/a", "runs/sweeps/b"])       # a run folder, or a sweep folder (its cells)
    rows = with_deltas(rows)                            # vs SimpleCPU and vs no offload, same run and phase
    table = aggregate(rows, over="seed")                # seeds folded: mean and a 95% interval

Only the folders' JSON is read (params.json, summary.json, metrics.json, a sweep's spec.json and cell.json), with
the strict reader (`strict_load.py`: bounded size, no duplicate keys, no NaN); parquet files are never opened, so a
folder from elsewhere is read as data only. The columns, their headers and their formats: `compare_columns.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.experiments.metrics import METRICS_FILE, mean_interval

MAX_RUN_JSON_BYTES = 16 << 20  # a whole Mooncake run's summary is a few kB; params.json grows with the trace's params
MAX_FOLDERS = 10_000
BASELINE_NAMES = {"simplecpu": "SimpleCPU", "no_offload": "no offload"}
# Config fields that say nothing about the result: where it went, whether bars were drawn.
NOT_COMPARED = ("out", "progress")


@dataclass(slots=True)
class Row:
    """One (run, variant, phase): where it came from, its config, the summary's phase row and its metrics."""

    source: str  # the folder as named, and the cell within a sweep
    config: dict[str, Any]
    summary: dict[str, Any]  # the run's summary.json, less its phases
    phase: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    slo_text: str | None = None
    derived: dict[str, Any] = field(default_factory=dict)  # % of prompt, deltas

    @property
    def key(self) -> tuple[str, str]:
        return str(self.phase.get("variant")), str(self.phase.get("phase"))


def read_json(path: Path) -> Any:
    from toolkit.strict_load import json_loads, read_bounded

    return json_loads(read_bounded(path, str(path), MAX_RUN_JSON_BYTES))


def load_rows(folders: list[str | Path]) -> list[Row]:
    """Every finished run in `folders` (a run folder, or a sweep folder's finished cells), in the order given."""
    if len(folders) > MAX_FOLDERS:
        raise BadInput(f"RUN: {len(folders)} folders, more than {MAX_FOLDERS}")
    rows: list[Row] = []
    for given in folders:
        path = Path(given)
        if not path.is_dir():
            raise BadInput(f"RUN: not a folder: {str(given)!r}")
        if (path / "spec.json").is_file():
            rows += _sweep_rows(path)
        elif (path / "summary.json").is_file():
            rows += _run_rows(path, str(given))
        else:
            raise BadInput(f"RUN: {str(given)!r} holds neither a finished run (summary.json) nor a sweep (spec.json)")
    return rows


def _sweep_rows(path: Path) -> list[Row]:
    rows: list[Row] = []
    cells = sorted(p for p in (path / "cells").glob("cell-*") if p.is_dir())
    for cell in cells[:MAX_FOLDERS]:
        state = read_json(cell / "cell.json") if (cell / "cell.json").is_file() else {}
        if state.get("status") == "done" and (cell / "summary.json").is_file():
            rows += _run_rows(cell, f"{path.name}/{state.get('label') or cell.name}")
    return rows


def _run_rows(path: Path, source: str) -> list[Row]:
    summary = read_json(path / "summary.json")
    params = read_json(path / "params.json") if (path / "params.json").is_file() else {}
    if not isinstance(summary, dict) or not isinstance(summary.get("phases"), list):
        raise BadInput(f"RUN: {path / 'summary.json'}: not a run summary (no phases list)")
    config = {k: _scalar(v) for k, v in (params.get("config") or {}).items() if k not in NOT_COMPARED}
    metrics: dict[tuple[str, str], dict[str, Any]] = {}
    slo_text = None
    if (path / METRICS_FILE).is_file():
        document = read_json(path / METRICS_FILE)
        slo_text = document.get("slo_text")
        metrics = {(str(m.get("variant")), str(m.get("phase"))): m for m in document.get("phases", [])}
    head = {k: v for k, v in summary.items() if k != "phases"}
    out = []
    for phase in summary["phases"]:
        if isinstance(phase, dict):
            row = Row(source, config, head, phase, slo_text=slo_text)
            row.metrics = metrics.get(row.key, {})
            out.append(row)
    return out


def _scalar(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in sorted(value.items()))
    return value


def with_deltas(rows: list[Row]) -> list[Row]:
    """% of prompt tokens, and each row against SimpleCPU and no offload of the same run and phase where present."""
    by_run: dict[tuple[str, str], dict[str, Row]] = {}
    for row in rows:
        by_run.setdefault((row.source, row.key[1]), {})[row.key[0]] = row
    for row in rows:
        p = row.phase
        prompt = p.get("prompt_tokens") or 0
        cpu, local = p.get("external_hit_tokens") or 0, p.get("local_hit_tokens") or 0
        row.derived["cpu_tier_pct"] = 100.0 * cpu / prompt if prompt else None
        row.derived["device_pct"] = 100.0 * local / prompt if prompt else None
        row.derived["recomputed_pct"] = 100.0 * (p.get("recomputed_tokens") or 0) / prompt if prompt else None
        peers = by_run[(row.source, row.key[1])]
        for name in BASELINE_NAMES:
            base = peers.get(name)
            if base is None or base is row:
                continue
            base_cpu = base.phase.get("external_hit_tokens") or 0
            row.derived[f"cpu_tier_delta_vs_{name}"] = cpu - base_cpu
            row.derived[f"cpu_tier_delta_pct_vs_{name}"] = 100.0 * (cpu - base_cpu) / base_cpu if base_cpu else None
            row.derived[f"recomputed_delta_vs_{name}"] = (p.get("recomputed_tokens") or 0) - (
                base.phase.get("recomputed_tokens") or 0
            )
            mine, theirs = _ttft_p50_ms(row), _ttft_p50_ms(base)
            row.derived[f"ttft_p50_delta_pct_vs_{name}"] = 100.0 * (mine - theirs) / theirs if mine and theirs else None
    return rows


def _ttft_p50_ms(row: Row) -> float | None:
    if row.metrics.get("ttft_p50_ms") is not None:
        return float(row.metrics["ttft_p50_ms"])
    value = row.phase.get("ttft_p50_s") or row.phase.get("median_ttft_s")
    return None if value is None else float(value) * 1e3


@dataclass(slots=True)
class TableRow:
    """A row of the comparison: its identifying values, then per column the mean and the 95% half-width."""

    ident: dict[str, Any]
    values: dict[str, float | int | str | None]
    halfwidths: dict[str, float | None]
    n: int


def aggregate(rows: list[Row], value_of: dict[str, Any], ident_of: list[str], over: str | None) -> list[TableRow]:
    """Rows grouped by their identity less `over` (e.g. "seed"): numbers become their mean and 95% half-width."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        ident = tuple(ident_value(row, name) for name in ident_of if name != over)
        groups.setdefault(ident, []).append(row)
    out = []
    for ident, members in groups.items():
        values: dict[str, Any] = {}
        halves: dict[str, float | None] = {}
        for name, get in value_of.items():
            found = [get(r) for r in members]
            numbers = [v for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if over and len(members) > 1 and numbers and len(numbers) == len(found):
                values[name], halves[name] = mean_interval(numbers)
            else:
                values[name], halves[name] = found[0], None
        names = [n for n in ident_of if n != over]
        out.append(TableRow(dict(zip(names, ident)), values, halves, len(members)))
    return out


def ident_value(row: Row, name: str) -> Any:
    if name == "variant":
        return row.key[0]
    if name == "phase":
        return row.key[1]
    if name == "run":
        return row.source
    return row.config.get(name)


def varying_config(rows: list[Row]) -> list[str]:
    """The config fields whose value differs between the rows' runs (what a comparison is about)."""
    names: list[str] = []
    for row in rows:
        names += [k for k in row.config if k not in names]
    return [n for n in names if len({repr(r.config.get(n)) for r in rows}) > 1]
