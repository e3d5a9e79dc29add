"""Record a real run's CPU tier for the cache-state visualizer (`kvtk replay --record-cache-state`).

A subscriber of the toolkit connector's own `OffloadManager` (`toolkit.core.observer`: it reads, never changes
what the manager does): the manager's typed events and diagnosed lookups are gathered as they happen, and at the
end of each connector step (`on_step`, once per `build_step`) the step is written with the manager's `snapshot()`,
in the `kvtk.cache_state/1` schema of `toolkit.viz.recording` (the file notebook 04 opens).

Only steps where something happened (a lookup or an event) are recorded: a decode-only step changes nothing the
widget shows. Each recorded step also says its `phase` and `connector_step` (the count of the manager's steps).

Bounded size (`RecordingCaps`, stated in the header's "caps"): at most 1,000 recorded steps and 8 MiB of JSON; per
step at most 40 events (the rest counted in one "note" event) and 64 block ids per list (a pool state's or an
event's; the counts stay whole: `num_lru_blocks` etc.); the lookups of the first 200 requests. When the step or
byte cap is reached recording stops, the steps kept stay complete, and the header's "truncated" says where and why.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolkit.core.events import ManagerEvent
from toolkit.core.lookup.result import LookupResult
from toolkit.core.metadata import StepMetadata
from toolkit.core.observer import OffloadObserver, subscribe, unsubscribe
from toolkit.core.requests import StepInput
from toolkit.private_fs import write_private_file
from toolkit.viz.recorder import header_groups, lookup_entry, normalise_events, pool_entry
from toolkit.viz.recording import SCHEMA

POOL_LISTS = (("lru_block_ids", "num_lru_blocks"), ("pinned_block_ids", "num_pinned_blocks"))
POOL_LISTS += (("in_flight_block_ids", "num_in_flight_blocks"),)


@dataclass(frozen=True, slots=True)
class RecordingCaps:
    """What bounds a recording's size; every cap is written into the recording's header."""

    max_steps: int = 1_000
    max_bytes: int = 8 * 2**20
    max_events_per_step: int = 40
    max_listed_blocks: int = 64
    max_requests: int = 200


class RunRecorder(OffloadObserver):
    """Subscribed to `manager` from construction until `close()`, which writes the recording to `path`."""

    needs_lookup_diagnosis = True  # per-group reach and reasons for the request entries
    wants_events = True

    def __init__(self, manager: Any, path: str | Path, *, source: str, caps: RecordingCaps | None = None) -> None:
        self.manager, self.path, self.source = manager, Path(path), source
        self.caps = caps or RecordingCaps()
        self.phase: str | None = None  # set by whoever runs the phases; written into every step
        self.truncated: str | None = None
        self.connector_step = 0
        self._events: list[ManagerEvent] = []
        self._lookups: list[tuple[str, LookupResult]] = []
        self._prompt_tokens: dict[str, int] = {}
        self._lines: list[str] = []
        self._bytes = 0
        first = pool_entry(manager.snapshot())
        self._capacity = first["num_free_blocks"] + sum(g["num_used_blocks"] for g in first["groups"])
        self._reserved = int(manager.snapshot()["num_cpu_blocks"]) - self._capacity  # the null block
        subscribe(manager, self)

    @property
    def num_steps(self) -> int:
        return len(self._lines)

    def on_lookup(self, request_id: str, local_tokens: int, result: LookupResult) -> None:
        if self.truncated is not None:
            return
        if request_id not in self._prompt_tokens:
            if len(self._prompt_tokens) >= self.caps.max_requests:
                return
            self._prompt_tokens[request_id] = result.local_tokens + result.max_hit_tokens + 1
        self._lookups.append((request_id, result))

    def on_event(self, event: ManagerEvent) -> None:
        if self.truncated is None:
            self._events.append(event)

    def on_step(self, step: StepInput, meta: StepMetadata) -> None:
        self.connector_step += 1
        self._flush()

    def _flush(self) -> None:
        if self.truncated is not None or not (self._events or self._lookups):
            return
        caps = self.caps
        if len(self._lines) >= caps.max_steps:
            self._stop(f"the cap of {caps.max_steps:,} recorded steps was reached")
            return
        line = json.dumps(self._step_record(), separators=(",", ":")) + "\n"
        if self._bytes + len(line) > caps.max_bytes:
            size = f"{caps.max_bytes / 2**20:g} MiB" if caps.max_bytes >= 2**20 else f"{caps.max_bytes:,} bytes"
            self._stop(f"the cap of {size} was reached")
        else:
            self._lines.append(line)
            self._bytes += len(line)

    def _stop(self, why: str) -> None:
        where = f" in phase {self.phase}" if self.phase else ""
        self.truncated = (
            f"recording stopped at connector step {self.connector_step:,}{where}: {why}; "
            f"the {len(self._lines):,} steps recorded before are complete"
        )
        self._events.clear()
        self._lookups.clear()

    def _step_record(self) -> dict[str, Any]:
        manager, caps = self.manager, self.caps
        num_groups = manager.geometry.num_groups
        record = {
            "type": "step",
            "step": len(self._lines),
            "phase": self.phase,
            "connector_step": self.connector_step,
            "pool": self._bounded_pool(pool_entry(manager.snapshot())),
            "events": self._bounded_events(normalise_events(self._events)),
            "requests": [
                lookup_entry(r, result, num_groups) for r, result in self._lookups[: caps.max_events_per_step]
            ],
        }
        self._events.clear()
        self._lookups.clear()
        return record

    def _bounded_pool(self, pool: dict[str, Any]) -> dict[str, Any]:
        limit = self.caps.max_listed_blocks
        for group in pool["groups"]:
            for ids_key, count_key in POOL_LISTS:
                ids = group[ids_key]
                if len(ids) > limit:
                    group[count_key] = len(ids)  # the whole count; the list keeps its first `limit` ids
                    group[ids_key] = ids[:limit]
        return pool

    def _bounded_events(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        caps = self.caps
        kept = events[: caps.max_events_per_step]
        for event in kept:
            ids = event["block_ids"]
            if len(ids) > caps.max_listed_blocks:
                event["block_ids"] = ids[: caps.max_listed_blocks]
                shown = f"{len(ids):,} blocks, the first {caps.max_listed_blocks} listed"
                event["reason"] = f"{event['reason']} ({shown})" if event["reason"] else shown
        rest = len(events) - len(kept)
        if rest:
            note = f"{rest:,} more events not recorded (cap {caps.max_events_per_step} a step)"
            kept.append({"kind": "note", "req_id": None, "group_id": None, "block_ids": [], "reason": note})
        return kept

    def header(self) -> dict[str, Any]:
        geometry = self.manager.geometry
        return {
            "type": "header",
            "schema": SCHEMA,
            "num_cpu_blocks": self._capacity,
            "num_reserved_blocks": self._reserved,
            "source": self.source,
            "geometry": geometry.describe(),
            "groups": header_groups(geometry),
            "requests": [{"req_id": r, "prompt_tokens": n} for r, n in self._prompt_tokens.items()],
            "recorded_steps": "connector steps with a lookup or an event (decode-only steps are not recorded)",
            "caps": asdict(self.caps),
            "truncated": self.truncated,
        }

    def write(self) -> int:
        """Write the recording as it stands (owner-only, atomically: a reader sees the old file or the new one);
        returns its size in bytes."""
        header = json.dumps(self.header(), separators=(",", ":")) + "\n"
        write_private_file(self.path, header + "".join(self._lines))
        return len(header) + self._bytes

    def close(self) -> Path:
        """Stop watching, write the recording (owner-only) and say where it is, how big, and whether a cap hit."""
        self._flush()  # what completed after the last step
        unsubscribe(self.manager, self)
        size_kib = self.write() / 1024
        note = f"; {self.truncated}" if self.truncated else ""
        print(
            f"cache-state recording: {self.path} ({self.num_steps:,} steps, {size_kib:,.0f} KiB){note}", file=sys.stderr
        )
        return self.path
