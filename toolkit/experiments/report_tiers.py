"""The run report's table of the tier below the CPU tier (disk or shared store), one row per phase that had one.

From the phase rows' columns (`engines/disk_columns.py`): where workers moved real bytes (the live engine), the
workers' own counts (`tier_*`: blocks and bytes read and written, the tier's hits, misses, refusals and failures,
read latency p50/p99, write amplification); else the scheduler's index of the tier (`disk_*`: the dry engine's
model), with the columns it cannot know left empty. A phase with the shared store below its disk (`below_tier_*`
from the live engine's workers, `shared_store_*` from the dry engine's model) has a second row, the store's.
"""

from __future__ import annotations

from typing import Any, Sequence

from toolkit.experiments.report_tables import Table

# (header, worker-count column, the scheduler index's column where the workers' is absent)
_COLUMNS = (
    ("blocks read", "tier_blocks_read", None),
    ("blocks written", "tier_blocks_written", "disk_blocks_demoted"),
    ("bytes read", "tier_bytes_read", "disk_bytes_read"),
    ("bytes written", "tier_bytes_written", "disk_bytes_written"),
    ("hits", "tier_hits", None),
    ("misses", "tier_misses", None),
    ("refusals", "tier_refusals", None),
    ("failures", "tier_failures", None),
    ("reads failed (recomputed)", "tier_reads_failed", None),
    ("writes not held", "tier_writes_not_held", None),
    ("read p50 ms", "tier_read_p50_ms", None),
    ("read p99 ms", "tier_read_p99_ms", None),
    ("write amplification", "tier_write_amplification", "disk_write_amplification"),
    ("held blocks", None, "disk_blocks_held"),
    ("held by group (group:blocks)", "tier_held_by_group", None),
)


def tier_table(phases: Sequence[dict[str, Any]]) -> Table | None:
    """One row per phase with a tier below the CPU tier (None when no phase had one); columns no row fills go."""
    rows = [row for p in phases if p.get("tier") or p.get("disk_blocks_held") is not None for row in _with_below(p)]
    if not rows:
        return None
    values = [[_value(p, worker, index) for _, worker, index in _COLUMNS] for p in rows]
    shown = [k for k in range(len(_COLUMNS)) if any(v[k] is not None for v in values)]
    headers = ["variant", "phase", "tier"] + [_COLUMNS[k][0] for k in shown]
    body = [
        [str(p.get("variant", "")), str(p.get("phase", "")), _tier_name(p)] + [v[k] for k in shown]
        for p, v in zip(rows, values)
    ]
    return Table(headers, body, text_columns=3)


def _with_below(phase: dict[str, Any]) -> list[dict[str, Any]]:
    """The phase's row, then its store's (the `below_tier_*` columns as `tier_*`) when a store is below the disk."""
    if phase.get("shared_store_blocks_held") is not None and not phase.get("tier"):  # the dry engine's model
        prefix = "shared_store_"
        store = {"disk_" + name.removeprefix(prefix): v for name, v in phase.items() if name.startswith(prefix)}
        return [phase, {"variant": phase.get("variant"), "phase": phase.get("phase"), **store, "tier_label": "store"}]
    if not phase.get("below_tier"):
        return [phase]
    below = {name.removeprefix("below_"): value for name, value in phase.items() if name.startswith("below_tier")}
    return [phase, {"variant": phase.get("variant"), "phase": phase.get("phase"), **below}]


def _tier_name(phase: dict[str, Any]) -> str:
    if phase.get("tier"):
        return str(phase["tier"])
    return f"{phase.get('tier_label') or 'disk'} (scheduler's index)"


def _value(phase: dict[str, Any], worker: str | None, index: str | None) -> Any:
    if phase.get("tier"):
        value = phase.get(worker) if worker else phase.get(index) if index else None
    else:
        value = phase.get(index) if index else None
    return None if isinstance(value, float) and value != value else value  # NaN: a parquet null


def tier_section(phases: Sequence[dict[str, Any]]) -> list[str]:
    """The report's HTML for `tier_table` (nothing without a tier below the CPU tier)."""
    from toolkit.experiments.report_html import html_table

    table = tier_table(phases)
    if table is None:
        return []
    return ["<h2>Tier below the CPU tier</h2>", html_table(table.headers, table.rows, text_columns=table.text_columns)]
