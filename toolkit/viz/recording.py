"""The cache-state recording: what one run of the offload manager looked like, step by step.

A recording is a JSON Lines file (parsed with `json`, never pickle). Line 1 is the header, every later line is one
step, in step order. Schema `kvtk.cache_state/1`:

    header:
      {"type": "header", "schema": "kvtk.cache_state/1",
       "source": str,                     # what produced it ("hand-made ...", "toolkit.viz.recorder ...")
       "num_cpu_blocks": int,             # usable CPU blocks, shared by every group (the null block excluded)
       "num_reserved_blocks": int,        # optional: configured but never usable (the null block: 1)
       "geometry": {...},                 # optional: HybridGeometry.describe()
       "groups": [{"group_id": int, "name": str, "kind": str, "block_tokens": int}],
       "requests": [{"req_id": str, "prompt_tokens": int}]}

    step (one per scheduler step, `step` counts from 0 without gaps):
      {"type": "step", "step": int,
       "pool": {                          # the CPU pool after the step
         "num_free_blocks": int,          # blocks holding no data (shared by all groups)
         "groups": [                      # one entry per group, in group order
           {"group_id": int,
            "num_used_blocks": int,       # blocks holding this group's data (evictable + pinned + in flight)
            "lru_block_ids": [int],       # evictable blocks (no reader, no writer), next victim first
            "pinned_block_ids": [int],    # blocks with a reader (a load in flight, a pending hit): not evictable
            "in_flight_block_ids": [int],   # blocks being written by a store not yet complete
            "num_lru_blocks": int,        # optional, with the two below: the whole count where the list above
            "num_pinned_blocks": int,     #   keeps only its first ids (a real run's recording bounds its size)
            "num_in_flight_blocks": int}]},
       "phase": str, "connector_step": int,  # optional: a real run's phase, and the manager's step count
       "requests": [                      # requests looked up in this step
         {"req_id": str,
          "boundaries": [int],            # per group: the token boundary that group alone could serve
          "joint_hit_tokens": int,        # the boundary every group agrees on (local prefix + external hit)
          "miss_reason": str,             # why the joint hit stops there ("none": the whole hashed prompt)
          "miss_reasons": [str | null]}], # per group: why it stops where it does (null: not a limiting group)
       "events": [                        # what happened in this step
         {"kind": "store" | "load" | "handoff" | "drop" | "lookup" | "complete" | ...,
          "req_id": str | null, "group_id": int | null, "block_ids": [int],   # CPU block ids
          "reason": str | null}]}         # drops: why ("evicted", "keys dropped", "cpu_full", ...)

Invariants checked by `validate`: sum of used blocks + free == num_cpu_blocks; lru, pinned and in-flight ids are
disjoint, belong to one group each and number at most the group's used blocks; every request entry has one
boundary and one miss reason per group; the joint hit is at most every boundary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from toolkit.errors import BadInput

SCHEMA = "kvtk.cache_state/1"
RECORDING_NAME = "cache_state.jsonl"  # a run folder's recording (`kvtk replay --record-cache-state`)
EVENT_KINDS = ("store", "load", "handoff", "drop", "lookup", "complete", "reset")


class RecordingError(BadInput):
    """A recording that does not follow the schema; the message names the line and the field."""


@dataclass(frozen=True)
class Recording:
    """A parsed, validated recording: the header and the steps (plain dicts, in step order)."""

    header: dict[str, Any]
    steps: tuple[dict[str, Any], ...]

    @property
    def groups(self) -> list[dict[str, Any]]:
        return self.header["groups"]

    @property
    def num_steps(self) -> int:
        return len(self.steps)


def load_recording(path: str | Path) -> Recording:
    """Read and validate a `.jsonl` recording."""
    path = Path(path)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise RecordingError(f"{path.name} line {number}: not JSON ({exc.msg})") from None
    return from_records(records, where=path.name)


def from_records(records: Iterable[dict[str, Any]], *, where: str = "recording") -> Recording:
    records = list(records)
    if not records:
        raise RecordingError(f"{where}: empty recording, expected a header line")
    header, steps = records[0], tuple(records[1:])
    validate(header, steps, where=where)
    return Recording(header=header, steps=steps)


def dump_recording(recording: Recording, path: str | Path) -> None:
    """Write one JSON object per line, header first."""
    validate(recording.header, recording.steps)
    with open(path, "w") as fh:
        for record in (recording.header, *recording.steps):
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")


def validate(header: dict[str, Any], steps: Iterable[dict[str, Any]], *, where: str = "recording") -> None:
    if header.get("type") != "header" or header.get("schema") != SCHEMA:
        raise RecordingError(
            f"{where} line 1: expected a header with schema {SCHEMA!r}, got "
            f"type={header.get('type')!r} schema={header.get('schema')!r}"
        )
    groups = header.get("groups")
    if not isinstance(groups, list) or not groups:
        raise RecordingError(f"{where} header: 'groups' must be a non-empty list")
    for i, g in enumerate(groups):
        if g.get("group_id") != i:
            raise RecordingError(f"{where} header: groups[{i}].group_id is {g.get('group_id')!r}, expected {i}")
        if not isinstance(g.get("block_tokens"), int) or g["block_tokens"] <= 0:
            raise RecordingError(f"{where} header: groups[{i}].block_tokens must be a positive int")
    capacity = header.get("num_cpu_blocks")
    if not isinstance(capacity, int) or capacity < 0:
        raise RecordingError(f"{where} header: num_cpu_blocks must be a non-negative int, got {capacity!r}")
    num_groups = len(groups)
    for index, step in enumerate(steps):
        at = f"{where} line {index + 2} (step {index})"
        if step.get("type") != "step" or step.get("step") != index:
            raise RecordingError(
                f"{at}: expected type 'step' with step={index}, got type={step.get('type')!r} step={step.get('step')!r}"
            )
        _check_pool(step.get("pool"), num_groups, capacity, at)
        for req in step.get("requests", []):
            _check_request(req, num_groups, f"{at} request {req.get('req_id')!r}")
        for ei, event in enumerate(step.get("events", [])):
            if not isinstance(event.get("kind"), str) or not event["kind"]:
                raise RecordingError(f"{at} events[{ei}]: 'kind' must be a non-empty string")
            gid = event.get("group_id")
            if gid is not None and not (isinstance(gid, int) and 0 <= gid < num_groups):
                raise RecordingError(f"{at} events[{ei}]: group_id {gid!r} out of range 0..{num_groups - 1}")


def _check_pool(pool: Any, num_groups: int, capacity: int, at: str) -> None:
    if not isinstance(pool, dict) or not isinstance(pool.get("groups"), list) or len(pool["groups"]) != num_groups:
        raise RecordingError(f"{at}: 'pool' needs 'num_free_blocks' and {num_groups} 'groups' entries")
    free = pool.get("num_free_blocks")
    if not isinstance(free, int) or free < 0:
        raise RecordingError(f"{at}: pool.num_free_blocks must be a non-negative int, got {free!r}")
    seen: set[int] = set()
    used_total = 0
    for gi, entry in enumerate(pool["groups"]):
        where = f"{at} pool.groups[{gi}]"
        if entry.get("group_id") != gi:
            raise RecordingError(f"{where}: group_id {entry.get('group_id')!r} != {gi}")
        used = entry.get("num_used_blocks")
        if not isinstance(used, int) or used < 0:
            raise RecordingError(f"{where}: num_used_blocks must be a non-negative int, got {used!r}")
        ids = [
            *entry.get("lru_block_ids", []),
            *entry.get("pinned_block_ids", []),
            *entry.get("in_flight_block_ids", []),
        ]
        if len(set(ids)) != len(ids) or seen & set(ids):
            raise RecordingError(f"{where}: a block id appears twice among lru/pinned/in-flight (or in two groups)")
        counted = sum(listed_count(entry, key) for key in LISTS)
        if counted > used:
            raise RecordingError(f"{where}: {counted} listed blocks exceed num_used_blocks {used}")
        seen |= set(ids)
        used_total += used
    if used_total + free != capacity:
        raise RecordingError(f"{at}: used {used_total} + free {free} != num_cpu_blocks {capacity}")


LISTS = ("lru_block_ids", "pinned_block_ids", "in_flight_block_ids")
COUNT_OF = {"lru_block_ids": "num_lru_blocks", "pinned_block_ids": "num_pinned_blocks"}
COUNT_OF["in_flight_block_ids"] = "num_in_flight_blocks"


def listed_count(entry: dict[str, Any], key: str) -> int:
    """How many blocks a pool list stands for: its whole count where the recording kept only the first ids."""
    ids = entry.get(key, [])
    count = entry.get(COUNT_OF[key], len(ids))
    if not isinstance(count, int) or count < len(ids):
        raise RecordingError(f"pool {COUNT_OF[key]}: {count!r} must be an int >= the {len(ids)} ids listed")
    return count


def _check_request(req: dict[str, Any], num_groups: int, at: str) -> None:
    boundaries = req.get("boundaries")
    reasons = req.get("miss_reasons", [None] * num_groups)
    if not isinstance(boundaries, list) or len(boundaries) != num_groups:
        raise RecordingError(f"{at}: 'boundaries' needs {num_groups} entries")
    if len(reasons) != num_groups:
        raise RecordingError(f"{at}: 'miss_reasons' needs {num_groups} entries")
    joint = req.get("joint_hit_tokens")
    if not isinstance(joint, int) or joint < 0 or any(joint > b for b in boundaries):
        raise RecordingError(f"{at}: joint_hit_tokens {joint!r} must be an int <= every boundary {boundaries}")
