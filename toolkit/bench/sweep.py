"""Sweep scaling: wall time of one grid of dry cells on a local Ray with --max-parallel 1 and then 2.

The grid (default 8 cells: 4 few-shot traces x 2 evictions, all four phases) runs once on two warm Ray workers
(both have imported vLLM, which takes seconds and is not what is measured), then is timed with each cap. Printed:
wall time per cap, the ratio, the sum of the cells' own run times (measured inside the workers) and what the driver
adds (writing cell folders and results.parquet; the HTML report is off). `--serial` also times the same cells in
this process, without Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=300, help="few-shot requests per trace (default 300)")
    parser.add_argument("--traces", type=int, default=4, help="distinct seeded traces (cells = traces x 2)")
    parser.add_argument("--caps", default="1,2", help="--max-parallel values to time, comma separated (default 1,2)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (default: the machine's)")
    parser.add_argument("--serial", action="store_true", help="also time the cells in this process, without Ray")
    parser.add_argument("--keep", default=None, help="keep the sweep folders here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def bench_spec(requests: int, traces: int) -> dict:
    return {
        "name": "bench",
        "fixed": {"phases": ["cold", "hot", "pressure", "replay"]},
        "axes": {
            "trace": [f"fewshot:num_requests={requests},seed={s}" for s in range(traces)],
            "eviction": ["slru", "lru"],
        },
    }


def _cell_seconds(path: Path) -> float:
    return sum(json.loads(p.read_text()).get("elapsed_s") or 0.0 for p in path.glob("cells/*/cell.json"))


def run(args: argparse.Namespace) -> int:
    import ray

    from toolkit.sweep import SweepOptions, parse_spec, run_sweep
    from toolkit.sweep.executor import init_ray

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # Ray workers inherit the driver's: stays set
    caps = [int(c) for c in args.caps.split(",") if c.strip()]
    spec = parse_spec(bench_spec(args.requests, args.traces))
    cells = len(spec.cells())
    root = Path(args.keep or tempfile.mkdtemp(prefix="kvtk-bench-sweep-"))
    temp_dir = tempfile.mkdtemp(prefix="kvtk-ray-")
    rows = []
    out = sys.stderr if args.json else sys.stdout
    try:
        init_ray(
            ray,
            address="local",
            num_cpus=args.num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _temp_dir=temp_dir,
        )
        warm = parse_spec(bench_spec(8, max(caps)))
        run_sweep(warm, SweepOptions(out=root / "warm-up", max_parallel=max(caps), progress=False, report=False))
        runs = [("ray", cap) for cap in caps] + ([("serial", 1)] if args.serial else [])
        for kind, cap in runs:
            row = _timed_run(spec, cells, root / f"{kind}-{cap}", kind, cap, out)
            if row is None:
                return 1
            rows.append(row)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    _report(args, caps, cells, rows)
    return 0


def _timed_run(spec, cells: int, folder: Path, kind: str, cap: int, out) -> dict | None:
    """One timed sweep of the grid with executor `kind` and `--max-parallel cap`; None if a cell failed."""
    from toolkit.sweep import SweepOptions, run_sweep

    t0 = time.perf_counter()
    result = run_sweep(
        spec, SweepOptions(out=folder, serial=kind == "serial", max_parallel=cap, progress=False, report=False)
    )
    wall = time.perf_counter() - t0
    if result.summary["failed"]:
        print(f"failed cells: {result.summary['failed_cells']}", file=sys.stderr)
        return None
    busy = _cell_seconds(folder)
    print(
        f"{kind:<7} max-parallel {cap}: {cells} cells in {wall:6.1f} s wall (cells' own time {busy:6.1f} s)",
        file=out,
        flush=True,
    )
    return {
        "executor": kind,
        "max_parallel": cap,
        "cells": cells,
        "wall_s": round(wall, 2),
        "cell_s_sum": round(busy, 2),
        "driver_and_idle_s": round(wall - busy / cap, 2),
    }


def _report(args, caps: list[int], cells: int, rows: list[dict]) -> None:
    by_cap = {r["max_parallel"]: r["wall_s"] for r in rows if r["executor"] == "ray"}
    ratio = by_cap[caps[0]] / by_cap[caps[-1]] if len(caps) > 1 else None
    document = {
        "cells": cells,
        "requests_per_trace": args.requests,
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "runs": rows,
        f"speedup_{caps[0]}_to_{caps[-1]}": round(ratio, 3) if ratio else None,
    }
    if args.json:
        print(json.dumps(document, indent=2))
    elif ratio:
        print(
            f"speed-up max-parallel {caps[0]} -> {caps[-1]}: {ratio:.2f}x on {os.cpu_count()} CPUs "
            f"(1-minute load average at the end {os.getloadavg()[0]:.1f}: other work shares the machine)"
        )
