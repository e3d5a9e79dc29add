"""The fine-grained map's grid: presets x DCP x hash unit x workload x CPU tier, and why a corner has no cell.

`data/sweeps/fine-grained-map.yaml` is `build_spec()` written out (`python -m toolkit.viz.map_grid`). The grid is
not a plain cross product: a hash unit that does not divide every group's block is refused by vLLM (and by
`HybridGeometry`), so such (preset, DCP, hash) corners get no cell; `geometry_verdicts()` lists every corner with
the geometry explorer's verdict (`kvtk geometry --preset P --dcp D --hash-block H`), the reason included.

Each cell runs the toolkit with fine-grained hits on (the main variant) against two baselines: the same connector
with block-aligned hits only (`no_fine_grained`) and vLLM's own SimpleCPU connector (`simplecpu`), phases cold then
hot (hot: the same prompts after the device prefix cache is reset, so what is reused comes from the CPU tier).
vLLM's DCP ranks split the TP group (DCP must divide TP), so each cell runs TP = DCP: the per-rank page bytes, and
with them the block sizes, change with it (Kimi-Linear's KDA block is 1,920 tokens at TP 1, 256 at TP 8).
The tight CPU tier holds `TIGHT_FRACTION` of the trace's distinct prompt blocks; the ample tier is the runner's
default (every prompt block of the trace, twice over).
"""

from __future__ import annotations

import math
from typing import Any

PRESETS = ("kimi-linear-48b-a3b", "nemotron-nano-9b-v2", "granite-4.0-h-small", "qwen3.5-4b", "qwen3-next-80b-a3b")
DCP_SIZES = (1, 2, 4, 8)
HASH_UNITS = (16, 64, 256)
MOONCAKE = "mooncake:../shared/traces/mooncake/synthetic_trace.jsonl"  # relative to the repository root
# workload label -> (trace spec, max_requests or None)
WORKLOADS = {
    "mooncake": (MOONCAKE, 64),
    "agentic": ("agentic:num_sessions=8,num_turns=4", None),
    "fewshot20": ("fewshot:num_requests=48,prefix_tokens=2000,question_tokens=100", None),  # 20 shots x 100 tokens
    "longdoc": ("longdoc:num_docs=3,doc_tokens=24000,num_questions=24", None),
}
TIERS = ("tight", "ample")
TIGHT_FRACTION = 0.25
FIXED = {"phases": ["cold", "hot"], "baselines": ["no_fine_grained", "simplecpu"], "gpu": "h200"}
VARIANT_ON, VARIANT_OFF, VARIANT_SIMPLECPU = "toolkit", "no_fine_grained", "simplecpu"


def geometry_verdicts(presets=PRESETS, dcp_sizes=DCP_SIZES, hash_units=HASH_UNITS) -> list[dict[str, Any]]:
    """Every (preset, dcp, hash) corner: valid or not, fine-grained or not, and the explorer's reason."""
    from toolkit.models.presets import geometry_from_preset

    rows = []
    for preset in presets:
        for dcp in dcp_sizes:
            for unit in hash_units:
                row: dict[str, Any] = {"model": preset, "dcp": dcp, "prefix_match_unit": unit}
                try:
                    geo = geometry_from_preset(preset, platform="cuda", dcp=dcp, tp=dcp, hash_block_tokens=unit)
                except ValueError as exc:
                    rows.append(
                        {
                            **row,
                            "valid": False,
                            "fine_grained": False,
                            "scheduler_block_tokens": None,
                            "reason": f"refused: {exc}",
                        }
                    )
                    continue
                verdict = geo.fine_grained
                rows.append(
                    {
                        **row,
                        "valid": True,
                        "fine_grained": verdict.enabled,
                        "scheduler_block_tokens": geo.scheduler_block_tokens,
                        "reason": "fine-grained on" if verdict.enabled else f"fine-grained off: {verdict.reason}",
                    }
                )
    return rows


def distinct_prompt_blocks(trace, block_tokens: int) -> int:
    """Distinct prefix blocks (of `block_tokens`, the last one partial) over the trace's prompts: what a CPU tier
    holding every reusable prefix once needs."""
    seen: set[int] = set()
    for request in trace.requests:
        tokens = trace.prompt_token_ids(request)
        parent = 0
        for start in range(0, len(tokens), block_tokens):
            parent = hash((parent, tuple(tokens[start : start + block_tokens])))
            seen.add(parent)
    return len(seen)


def tight_cpu_gib(
    preset: str, dcp: int, trace_spec: str, max_requests: int | None, fraction: float = TIGHT_FRACTION
) -> float:
    """A CPU tier holding `fraction` of the trace's distinct prompt blocks (at least two scheduler blocks), GiB."""
    from toolkit.models.presets import geometry_from_preset
    from toolkit.workloads.resolve import resolve_trace

    geo = geometry_from_preset(preset, platform="cuda", dcp=dcp, tp=dcp)
    sched = geo.scheduler_block_tokens
    sched_bytes = geo.blocks_per_scheduler_block * geo.block_bytes
    blocks = distinct_prompt_blocks(resolve_trace(trace_spec, max_requests=max_requests), sched)
    gib = max(fraction * blocks, 2) * sched_bytes / 2**30
    return float(f"{gib:.3g}")  # three significant digits: readable in the spec


def build_spec(presets=PRESETS, workloads=None) -> dict[str, Any]:
    """The map as a cells-only sweep spec: one cell per valid corner x workload x tier."""
    workloads = WORKLOADS if workloads is None else workloads
    cells = []
    tight_cache: dict[tuple, float] = {}
    for corner in geometry_verdicts(presets):
        if not corner["valid"]:
            continue
        for spec, max_requests in workloads.values():
            for tier in TIERS:
                cell = {
                    "model": corner["model"],
                    "tp": corner["dcp"],
                    "dcp": corner["dcp"],
                    "prefix_match_unit": corner["prefix_match_unit"],
                    "trace": spec,
                }
                if max_requests is not None:
                    cell["max_requests"] = max_requests
                if tier == "tight":
                    key = (corner["model"], corner["dcp"], spec, max_requests)
                    if key not in tight_cache:
                        tight_cache[key] = tight_cpu_gib(corner["model"], corner["dcp"], spec, max_requests)
                    cell["cpu_gib"] = tight_cache[key]
                cells.append(cell)
    return {
        "name": "fine-grained-map",
        "description": "where fine-grained CPU-tier hits pay: toolkit with fine-grained hits on vs off vs vLLM's "
        "SimpleCPU, per preset x DCP x hash unit x workload x CPU tier (tight: "
        f"{TIGHT_FRACTION:.0%} of the trace's distinct prompt blocks; ample: the default)",
        "fixed": dict(FIXED),
        "cells": cells,
        "resources": {"num_cpus": 1, "memory_gib": 3},
    }


def workload_label(trace: str) -> str:
    for label, (spec, _) in WORKLOADS.items():
        if trace == spec:
            return label
    return trace.split(":", 1)[0]


def tier_label(cpu_gib: Any) -> str:
    return "ample" if cpu_gib is None or (isinstance(cpu_gib, float) and math.isnan(cpu_gib)) else "tight"


def shrink_spec(spec: dict[str, Any], *, max_requests: int, cells: list[int] | None = None) -> dict[str, Any]:
    """A CI-sized copy: the chosen cells (indices into the spec's cells), each replaying at most `max_requests`
    requests of its trace; the tight tiers keep their GiB (so they are less tight on the smaller trace)."""
    chosen = spec["cells"] if cells is None else [spec["cells"][i] for i in cells]
    small = [{**c, "max_requests": min(max_requests, c.get("max_requests") or max_requests)} for c in chosen]
    return {**spec, "name": spec["name"] + "-ci", "cells": small}


def _header() -> str:
    return (
        "# kvtk sweep data/sweeps/fine-grained-map.yaml --serial   (from the repository root: the Mooncake cells read\n"
        "# ../shared/traces/mooncake/synthetic_trace.jsonl). Written by `python -m toolkit.viz.map_grid`; drawn by\n"
        "# notebooks/07_fine_grained_map.py. (preset, dcp, hash) corners vLLM refuses have no cell: see\n"
        "# toolkit.viz.map_grid.geometry_verdicts() or `kvtk geometry --preset P --dcp D --hash-block H`.\n"
    )


def write_spec(path) -> None:
    import json
    from pathlib import Path

    spec = build_spec()
    lines = [
        _header(),
        f"name: {spec['name']}",
        f"description: {json.dumps(spec['description'])}",
        f"fixed: {json.dumps(spec['fixed'])}",
        f"resources: {json.dumps(spec['resources'])}",
        "cells:",
    ]
    lines += [f"  - {json.dumps(c)}" for c in spec["cells"]]
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    write_spec(sys.argv[1] if len(sys.argv) > 1 else "data/sweeps/fine-grained-map.yaml")
