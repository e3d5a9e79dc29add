"""`kvtk replay` with a comma list in a numeric option (`--cpu-gib 64,128,256,512`) or `--seeds 1,2`: the grid of
dry runs, on `toolkit/sweep`'s machinery (its folder, cells, retries; Ray where `--ray-address` or RAY_ADDRESS
names a cluster, else one cell after another in this process), then one comparison table, compare.csv and
compare.parquet, and report.html in the sweep folder.

Lists are checked before anything runs: every item is a number of the option's kind, no item repeats, every value
makes a valid config (one line naming the option and the value, exit 2, no folder).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput

MAX_CELLS = 1_000  # a command-line grid; larger ones belong in a sweep spec (kvtk sweep)


@dataclass(frozen=True, slots=True)
class Grid:
    """The swept options (field -> the values as given) and the seeds, checked."""

    axes: dict[str, list[str]]
    seeds: list[int]

    @property
    def swept(self) -> list[str]:
        return list(self.axes)

    @property
    def empty(self) -> bool:
        return not self.axes and not self.seeds


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def split_list(name: str, word: str, kind: type) -> list[str]:
    """`64,128` -> ["64", "128"], each a number of `kind`; a bad or repeated item raises naming both."""
    items = [part.strip() for part in word.split(",")]
    for item in items:
        try:
            kind(item)
        except ValueError:
            raise BadInput(f"{_flag(name)}: invalid {kind.__name__} value {item!r} in the list {word!r}") from None
    numbers = [kind(i) for i in items]
    if len(set(numbers)) != len(numbers):
        raise BadInput(f"{_flag(name)}: a value repeats in the list {word!r}")
    return items


def parse_grid(params: dict[str, Any], seeds_word: str | None) -> tuple[dict[str, Any], Grid]:
    """The parameters with every list taken out, and the grid those lists make."""
    from toolkit.cli.config_options import numeric_fields

    fixed, axes = dict(params), {}
    for name, kind in numeric_fields().items():
        value = params.get(name)
        if isinstance(value, str) and "," in value:
            axes[name] = split_list(name, value, kind)
            del fixed[name]
    seeds = [int(s) for s in split_list("seeds", seeds_word, int)] if seeds_word is not None else []
    if any(not 0 <= s < 2**32 for s in seeds):
        raise BadInput(f"--seeds: each seed must be in [0, 2^32), got {seeds_word!r}")
    grid = Grid(axes, seeds)
    cells = 1
    for values in [*axes.values(), seeds or [0]]:
        cells *= len(values)
    if cells > MAX_CELLS:
        raise BadInput(f"{', '.join(map(_flag, grid.swept))}: {cells} runs, more than {MAX_CELLS}; use kvtk sweep")
    return fixed, grid


def with_seed(trace: str, seed: int) -> str:
    """A generator spec drawn with `seed` (`fewshot:num_requests=8` -> `fewshot:num_requests=8,seed=1`); a file or
    committed trace is returned as is (only the pressure traffic's seed varies then)."""
    from toolkit.workloads.registry import TRACE_SPECS

    kind, _, rest = trace.partition(":")
    if kind not in TRACE_SPECS:
        return trace
    items = [item for item in rest.split(",") if item and not item.startswith("seed=")]
    return f"{kind}:{','.join([*items, f'seed={seed}'])}"


def grid_cells(fixed: dict[str, Any], grid: Grid) -> list[dict[str, Any]]:
    """Every cell's own parameters (the swept values, the seed and a seeded trace), in the order given."""
    names = grid.swept
    out = []
    for combo in itertools.product(*(grid.axes[n] for n in names)):
        for seed in grid.seeds or [None]:
            cell: dict[str, Any] = dict(zip(names, combo))
            if seed is not None:
                cell["seed"] = seed
                seeded = with_seed(str(fixed.get("trace") or "fewshot-small"), seed)
                if seeded != fixed.get("trace"):
                    cell["trace"] = seeded
            out.append(cell)
    return out


def check_cells(fixed: dict[str, Any], cells: list[dict[str, Any]]) -> None:
    """Every value of every list makes a valid config: a bad one names its option and value."""
    from toolkit.experiments.config import ExperimentConfig

    if fixed.get("engine", "dry") != "dry":
        raise BadInput(f"--engine {fixed['engine']}: a list of values sweeps dry runs only; run this engine per value")
    seen: set[str] = set()
    for cell in cells:
        for name, value in cell.items():
            if f"{name}={value}" in seen:
                continue
            seen.add(f"{name}={value}")
            try:
                ExperimentConfig.from_params({**fixed, name: value})
            except ValueError as exc:
                raise BadInput(f"{_flag(name)}={value}: {exc}") from None


def seeds_note(fixed: dict[str, Any], cells: list[dict[str, Any]], grid: Grid) -> str | None:
    """Said before a grid whose seeds cannot change a number: no pressure phase and a trace that is not drawn."""
    from toolkit.experiments.config import ExperimentConfig

    if not grid.seeds or any("trace" in cell for cell in cells):
        return None
    if "pressure" in ExperimentConfig.from_params(fixed).workload.phases:
        return None
    return (
        "note: --seeds varies the pressure traffic and a generated trace's draw; this grid has neither, so every "
        "seed gives the same numbers (the tables show no interval)"
    )


def ray_address(args: argparse.Namespace) -> str | None:
    return args.ray_address or os.environ.get("RAY_ADDRESS") or None


def run_grid(args: argparse.Namespace, params: dict[str, Any], grid: Grid) -> int:
    """Run the grid, print the comparison, write the tables and the report; 1 when a cell failed."""
    from toolkit.experiments.metrics import Slo, write_sweep_metrics
    from toolkit.limits import path_component
    from toolkit.sweep import SweepOptions, run_sweep
    from toolkit.sweep.executor import RayUnavailable
    from toolkit.sweep.spec import SweepSpec

    slo = Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms)
    fixed = {k: v for k, v in params.items() if k not in ("out", "progress") and v is not None}
    cells = grid_cells(fixed, grid)
    check_cells(fixed, cells)
    note = seeds_note(fixed, cells, grid)
    if note:
        print(note, file=sys.stderr)
    address = ray_address(args)
    name = f"replay-{path_component(str(fixed.get('trace', 'fewshot-small')))}"[:80]
    spec = SweepSpec(name=name, fixed=fixed, axes={}, extra_cells=cells)
    options = SweepOptions(out=args.out, serial=address is None, address=address, progress=True, report=False)
    try:
        result = run_sweep(spec, options)
    except RayUnavailable:  # asked for Ray where it is not installed: before any folder
        raise BadInput(
            f"--ray-address {address}: Ray is not installed (pip install 'hybrid-kv-toolkit[sweep]'); without "
            "--ray-address and RAY_ADDRESS the grid runs in this process"
        ) from None
    write_sweep_metrics(result.path, slo)
    return report_grid(result.path, grid, result.summary)


def report_grid(path: Path, grid: Grid, summary: dict[str, Any]) -> int:
    from toolkit.experiments.compare import load_rows, with_deltas
    from toolkit.experiments.compare_table import format_table, write_tables
    from toolkit.experiments.report_sweep import write_grid_report

    over = "seed" if grid.seeds else None
    rows = with_deltas(load_rows([path]))
    print(format_table(rows, swept=grid.swept, over=over))
    tables = write_tables(rows, path / "compare", swept=grid.swept, over=over)
    report = write_grid_report(path, rows, swept=grid.swept, over=over)
    print(f"{summary['done']}/{summary['cells']} runs done, {summary['failed']} failed, on {summary.get('executor')}")
    for failed in summary["failed_cells"]:
        print(f"FAILED {failed['label']}: {failed['error']}")
    print(f"sweep folder: {path}")
    print(f"tables: {', '.join(str(t) for t in tables)}")
    print(f"report: {report}")
    return 1 if summary["failed"] else 0
