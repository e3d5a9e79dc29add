"""Run a sweep: validate every cell, then run the unfinished ones (retrying a failed cell once) and collect.

    result = run_sweep(load_spec("data/sweeps/eviction-by-workload.yaml"), SweepOptions(out="runs/sweeps/x"))
    result.results      # polars: one row per cell x variant x phase, the cell's parameters as columns
    result.summary      # what summary.json holds (failed cells with their errors)

A sweep folder that holds a spec.json is only continued with `resume=True`, and only if the spec expands to the
same cells; finished cells are skipped, the others (failed, running when killed, never started) run again.
"""

from __future__ import annotations

import collections
import re
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.sweep.cell import make_task
from toolkit.sweep.executor import Progress, RayExecutor, SerialExecutor
from toolkit.sweep.folder import STATUS_DONE, STATUS_FAILED, SweepFolder
from toolkit.sweep.spec import Cell, SweepSpec, validate_cells

# Ray's own address forms; joining a cluster runs its code with this user's rights (docs/inputs.md).
_ADDRESS = re.compile(r"auto|local|(ray://)?[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]{1,5}|(ray://)?\[[0-9A-Fa-f:]+\]:[0-9]{1,5}")


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    out: str | Path | None = None  # sweep folder (None: runs/sweeps/<time>-<name>)
    serial: bool = False  # run the cells in this process, without Ray
    address: str | None = None  # Ray: None starts a local Ray; "auto" or "ray://host:port" joins one
    max_parallel: int | None = None  # cells in flight at once (None: as many as Ray's resources allow)
    num_cpus: float | None = None  # per Ray task (None: the spec's resources, default 1)
    memory_gib: float | None = None  # per Ray task (None: the spec's resources, default 2)
    resume: bool = False
    retries: int = 1  # extra attempts for a failed cell before it is reported failed
    notebook: str | None = None  # run this notebook per cell (papermill batch) instead of the experiment
    notebook_timeout_s: int = 600
    progress: bool = True
    report: bool = True

    def __post_init__(self) -> None:
        if self.max_parallel is not None and self.max_parallel < 1:
            raise BadInput(f"max_parallel: must be at least 1, got {self.max_parallel}")
        if self.retries < 0:
            raise BadInput(f"retries: must be 0 or more, got {self.retries}")
        for name in ("num_cpus", "memory_gib"):
            value = getattr(self, name)
            if value is not None and not 0 < value < float("inf"):
                raise BadInput(f"{name}: must be a finite positive number, got {value}")
        if self.address is not None and not _ADDRESS.fullmatch(self.address):
            raise BadInput(f"address: expected auto, local, host:port or ray://host:port, got {self.address!r:.80}")
        if self.serial and self.address:
            raise BadInput(f"address: {self.address!r} joins a Ray cluster; it cannot be combined with serial")


@dataclass
class SweepResult:
    path: Path
    summary: dict[str, Any]
    results: Any  # polars.DataFrame
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return self.summary["failed_cells"]


def default_out(spec: SweepSpec) -> Path:
    """A new folder runs/sweeps/<time>-<name> (-2, -3, ... when two sweeps start in the same second)."""
    from toolkit.private_fs import unique_dir

    return unique_dir(Path("runs") / "sweeps", f"{time.strftime('%Y%m%d-%H%M%S')}-{spec.name}")


def resolve_notebook(name: str) -> Path:
    from toolkit.notebooks_runner import select_notebooks

    chosen = select_notebooks([name])
    if len(chosen) != 1:
        raise BadInput(f"notebook: {name!r} matches {len(chosen)} notebooks: {', '.join(p.stem for p in chosen)}")
    return chosen[0]


def check_notebook_params(notebook: Path, cells: list[Cell]) -> None:
    """Every cell parameter must be one of the notebook's declared parameters (as `kvtk notebooks -p` requires)."""
    from toolkit.notebooks_runner import declared_parameters

    declared = declared_parameters(notebook)
    for cell in cells:
        for name in cell.params:
            if name not in declared or name == "out_dir":
                raise BadInput(
                    f"cell {cell.index} ({cell.label}): notebook {notebook.stem} has no parameter "
                    f"{name!r}; its parameters: {', '.join(n for n in declared if n != 'out_dir')}"
                )


def run_sweep(spec: SweepSpec, options: SweepOptions = SweepOptions()) -> SweepResult:
    cells = spec.cells()
    if not options.serial:
        from toolkit.sweep.executor import import_ray

        import_ray()  # before any folder is made: a missing extra says how to install it
    notebook = resolve_notebook(options.notebook) if options.notebook else None
    if notebook is not None:
        check_notebook_params(notebook, cells)
    else:
        validate_cells(cells)
    folder = SweepFolder(options.out or default_out(spec), resume=options.resume)
    previous = folder.read_spec()
    if previous is not None and [c["key"] for c in previous.get("cells", [])] != [c.key for c in cells]:
        raise BadInput(
            f"resume: the spec expands to other cells than the sweep in {folder.path} was started "
            f"with; start a new sweep folder"
        )
    todo = [c for c in cells if not folder.is_done(c)]
    executor = _executor(spec, options) if todo else SerialExecutor()
    started = time.time()
    try:
        executor_info = executor.describe()  # while its session is up (close() may shut it down)
        folder.write_spec(_spec_document(spec, cells, options, notebook, executor_info, previous))
        attempts = _run_cells(
            folder, todo, executor, options, notebook, skipped=len(cells) - len(todo), total=len(cells)
        )
    finally:
        executor.close()
    results = folder.results_frame(cells)
    paths = {"results": folder.write_results(results)}
    summary = _summary(spec, folder, cells, todo, attempts, executor_info, time.time() - started, options)
    paths["summary"] = folder.write_summary(summary)
    if options.report:
        from toolkit.sweep.report import write_sweep_report

        paths["report"] = write_sweep_report(folder.path, summary, results)
    return SweepResult(folder.path, summary, results, paths)


def _executor(spec: SweepSpec, options: SweepOptions):
    if options.serial:
        return SerialExecutor()
    num_cpus = options.num_cpus or spec.resources["num_cpus"]
    memory_gib = options.memory_gib or spec.resources["memory_gib"]
    return RayExecutor(address=options.address, num_cpus=num_cpus, memory_bytes=int(memory_gib * 2**30))


def _run_cells(
    folder: SweepFolder, todo: list[Cell], executor, options: SweepOptions, notebook, *, skipped: int, total: int
) -> dict[str, int]:
    """Keep at most max_parallel cells in flight; a failed cell goes back in the queue until its retries are spent."""
    limit = 1 if options.serial else (options.max_parallel or max(1, len(todo)))
    queue = collections.deque(todo)
    attempts: dict[str, int] = {}
    in_flight = 0
    progress = Progress(total=total, skipped=skipped, enabled=options.progress)
    progress.show()
    try:
        while queue or in_flight:
            while queue and in_flight < limit:
                cell = queue.popleft()
                attempts[cell.cell_id] = attempts.get(cell.cell_id, 0) + 1
                folder.mark_running(cell, attempts[cell.cell_id])
                executor.submit(cell, make_task(cell.params, notebook=notebook, timeout_s=options.notebook_timeout_s))
                in_flight += 1
                progress.running = in_flight
            cell, outcome = executor.next_done()
            in_flight -= 1
            final = outcome["ok"] or attempts[cell.cell_id] > options.retries
            folder.record(cell, outcome, attempts=attempts[cell.cell_id], final=final)
            if outcome["ok"]:
                progress.done += 1
            elif final:
                progress.failed += 1
            else:
                queue.append(cell)  # retried after the cells already waiting, so one bad cell does not stall
            progress.running = in_flight
            progress.show()
    finally:
        progress.close()
    return attempts


def _spec_document(spec, cells, options, notebook, executor_info, previous) -> dict[str, Any]:
    from toolkit.experiments.results import versions

    found = versions()
    try:
        found["ray"] = metadata.version("ray")
    except metadata.PackageNotFoundError:  # a serial sweep runs without Ray
        pass
    runs = list((previous or {}).get("runs", []))
    runs.append(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "resume": options.resume,
            "max_parallel": options.max_parallel,
            **executor_info,
        }
    )
    return {
        "spec": spec.to_json(),
        "notebook": notebook.stem if notebook else None,
        "cells": [{"cell_id": c.cell_id, "key": c.key, "label": c.label, "params": c.params} for c in cells],
        "versions": found,
        "runs": runs,
    }


def _summary(spec, folder, cells, todo, attempts, executor_info, elapsed_s, options) -> dict[str, Any]:
    states = {c.cell_id: (folder.cell_state(c) or {}) for c in cells}
    failed = [
        {
            "cell_id": c.cell_id,
            "label": c.label,
            "params": c.params,
            "attempts": states[c.cell_id].get("attempts"),
            "error": states[c.cell_id].get("error"),
        }
        for c in cells
        if states[c.cell_id].get("status") == STATUS_FAILED
    ]
    done = sum(1 for c in cells if states[c.cell_id].get("status") == STATUS_DONE)
    return {
        "name": spec.name,
        "sweep_dir": str(folder.path),
        "notebook": options.notebook,
        **executor_info,
        "max_parallel": options.max_parallel,
        "cells": len(cells),
        "done": done,
        "failed": len(failed),
        "ran": len(todo),
        "skipped_finished": len(cells) - len(todo),
        "retried": sum(1 for n in attempts.values() if n > 1),
        "elapsed_s": round(elapsed_s, 3),
        "failed_cells": failed,
        "cell_status": [
            {
                "cell_id": c.cell_id,
                "label": c.label,
                "status": states[c.cell_id].get("status"),
                "attempts": states[c.cell_id].get("attempts"),
                "elapsed_s": states[c.cell_id].get("elapsed_s"),
                "host": states[c.cell_id].get("host"),
            }
            for c in cells
        ],
    }
