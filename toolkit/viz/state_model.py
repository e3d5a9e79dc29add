"""The cache-state visualizer's model: the state of step k of a recording, with no drawing in it.

The widget (`toolkit.viz.widget`) only turns these views into figures and text, so everything a user sees is
decided here and unit-tested without a kernel or a browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.viz.recording import LISTS, RECORDING_NAME, Recording, listed_count, load_recording


@dataclass(frozen=True)
class GroupPoolView:
    """One group's share of the CPU pool after a step (the pool is shared: free blocks belong to no group)."""

    group_id: int
    name: str
    kind: str
    num_used_blocks: int
    lru_block_ids: tuple[int, ...]
    pinned_block_ids: tuple[int, ...]
    in_flight_block_ids: tuple[int, ...]
    # (evictable, pinned, in flight) where a real run's recording listed only the first ids of a state
    counts: tuple[int, int, int] | None = None

    @property
    def num_evictable(self) -> int:
        return self.counts[0] if self.counts else len(self.lru_block_ids)

    @property
    def num_pinned(self) -> int:
        return self.counts[1] if self.counts else len(self.pinned_block_ids)

    @property
    def num_in_flight(self) -> int:
        return self.counts[2] if self.counts else len(self.in_flight_block_ids)

    @property
    def num_other(self) -> int:
        """Used blocks the recording did not classify (0 for recordings made by the recorder)."""
        return self.num_used_blocks - self.num_evictable - self.num_pinned - self.num_in_flight


@dataclass(frozen=True)
class RequestView:
    """The selected request's per-group boundaries as of a step; `as_of_step` is when they were last looked up."""

    req_id: str
    prompt_tokens: int
    boundaries: tuple[int, ...]
    joint_hit_tokens: int
    miss_reason: str
    miss_reasons: tuple[str | None, ...]
    as_of_step: int

    @property
    def limiting_group_ids(self) -> tuple[int, ...]:
        """The groups with a miss reason: the ones whose reach stopped the joint hit."""
        return tuple(i for i, r in enumerate(self.miss_reasons) if r)


@dataclass(frozen=True)
class StepView:
    step: int
    num_steps: int
    num_cpu_blocks: int
    num_free_blocks: int
    pools: tuple[GroupPoolView, ...]
    request: RequestView | None
    events: tuple[dict[str, Any], ...]


class CacheStateModel:
    """A cursor over a recording: the current step and the selected request.

    `step` is clamped to [0, num_steps - 1] by `go_to`; setting an unknown request raises `ValueError`.
    """

    def __init__(self, recording: Recording) -> None:
        if recording.num_steps == 0:
            raise ValueError("recording: has no steps to show")
        self.recording = recording
        self._prompt_tokens = {
            r["req_id"]: int(r.get("prompt_tokens", 0)) for r in recording.header.get("requests", [])
        }
        for step in recording.steps:  # requests the header forgot still get a picker entry
            for req in step.get("requests", []):
                self._prompt_tokens.setdefault(req["req_id"], max(req["boundaries"]))
        self.step = 0
        self.req_id: str | None = self.request_ids[0] if self.request_ids else None

    @classmethod
    def from_path(cls, path: str | Path) -> "CacheStateModel":
        return cls(load_recording(path))

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> "CacheStateModel":
        """The recording a `kvtk replay --record-cache-state` run wrote into its run folder."""
        path = Path(run_dir) / RECORDING_NAME
        if not path.is_file():
            raise BadInput(
                f"run_dir: {run_dir} holds no {RECORDING_NAME}; record a run with `kvtk replay --record-cache-state` "
                "(dry or live engine)"
            )
        return cls.from_path(path)

    # ----- cursor --------------------------------------------------------------------------------------------

    @property
    def num_steps(self) -> int:
        return self.recording.num_steps

    @property
    def request_ids(self) -> list[str]:
        return list(self._prompt_tokens)

    @property
    def group_names(self) -> list[str]:
        return [g.get("name") or f"g{g['group_id']}" for g in self.recording.groups]

    @property
    def num_reserved_blocks(self) -> int:
        """CPU blocks configured but never usable: the pool's null block (a placeholder id that holds no data)."""
        return int(self.recording.header.get("num_reserved_blocks", 0))

    def go_to(self, step: int) -> StepView:
        self.step = max(0, min(int(step), self.num_steps - 1))
        return self.view()

    def next(self) -> StepView:
        return self.go_to(self.step + 1)

    def prev(self) -> StepView:
        return self.go_to(self.step - 1)

    def select(self, req_id: str) -> StepView:
        if req_id not in self._prompt_tokens:
            raise ValueError(f"req_id: unknown request {req_id!r}; known: {', '.join(self.request_ids)}")
        self.req_id = req_id
        return self.view()

    # ----- views ---------------------------------------------------------------------------------------------

    def view(self, step: int | None = None) -> StepView:
        k = self.step if step is None else step
        if not 0 <= k < self.num_steps:
            raise ValueError(f"step: {k} is outside 0..{self.num_steps - 1}")
        record = self.recording.steps[k]
        pools = tuple(self._pool_view(entry) for entry in record["pool"]["groups"])
        request = self.request_view(self.req_id, k) if self.req_id is not None else None
        return StepView(
            step=k,
            num_steps=self.num_steps,
            num_cpu_blocks=self.recording.header["num_cpu_blocks"],
            num_free_blocks=record["pool"]["num_free_blocks"],
            pools=pools,
            request=request,
            events=tuple(record.get("events", [])),
        )

    def request_view(self, req_id: str, step: int) -> RequestView | None:
        """The request's latest lookup at or before `step`; None before its first one."""
        for k in range(step, -1, -1):
            for req in self.recording.steps[k].get("requests", []):
                if req["req_id"] == req_id:
                    n = len(req["boundaries"])
                    return RequestView(
                        req_id=req_id,
                        prompt_tokens=self._prompt_tokens[req_id],
                        boundaries=tuple(req["boundaries"]),
                        joint_hit_tokens=req["joint_hit_tokens"],
                        miss_reason=req.get("miss_reason") or "",
                        miss_reasons=tuple(req.get("miss_reasons", [None] * n)),
                        as_of_step=k,
                    )
        return None

    def _pool_view(self, entry: dict[str, Any]) -> GroupPoolView:
        group = self.recording.groups[entry["group_id"]]
        counts = tuple(listed_count(entry, key) for key in LISTS)
        listed = tuple(len(entry.get(key, [])) for key in LISTS)
        return GroupPoolView(
            counts=counts if counts != listed else None,  # type: ignore[arg-type]
            group_id=entry["group_id"],
            name=group.get("name") or f"g{entry['group_id']}",
            kind=group.get("kind", ""),
            num_used_blocks=entry["num_used_blocks"],
            lru_block_ids=tuple(entry.get("lru_block_ids", [])),
            pinned_block_ids=tuple(entry.get("pinned_block_ids", [])),
            in_flight_block_ids=tuple(entry.get("in_flight_block_ids", [])),
        )

    # ----- text and tables the widget shows ----------------------------------------------------------------

    def status_lines(self, step: int | None = None) -> list[str]:
        """The labelled status text: `step N of M`, the pool totals, one line per group, the request's joint hit.

        The browser test reads exactly these lines from the page.
        """
        v = self.view(step)
        used = v.num_cpu_blocks - v.num_free_blocks
        reserved = (
            f" (+{self.num_reserved_blocks} null block: a placeholder id, never holds data)"
            if self.num_reserved_blocks
            else ""
        )
        lines = [
            f"step {v.step} of {v.num_steps - 1}{self._where(v.step)}",
            f"pool: used {used}/{v.num_cpu_blocks} free {v.num_free_blocks}{reserved}",
        ]
        for p in v.pools:
            lines.append(
                f"{p.name}: used {p.num_used_blocks} evictable {p.num_evictable} pinned {p.num_pinned} "
                f"in flight {p.num_in_flight}"
            )
        r = v.request
        if r is None:
            lines.append(f"request {self.req_id}: not looked up yet" if self.req_id else "no request")
        else:
            lines.append(
                f"request {r.req_id}: joint hit {r.joint_hit_tokens} of {r.prompt_tokens} tokens "
                f"(miss: {r.miss_reason or 'none'}, as of step {r.as_of_step})" + self._since_lookup(r, v)
            )
        if self.recording.header.get("truncated"):
            lines.append(f"recording: {self.recording.header['truncated']}")
        return lines

    def _where(self, step: int) -> str:
        """A real run's step: its phase and the manager's step count (absent from synthetic recordings)."""
        record = self.recording.steps[step]
        parts = [f"phase {record['phase']}"] if record.get("phase") else []
        if isinstance(record.get("connector_step"), int):
            parts.append(f"connector step {record['connector_step']:,}")
        return f" ({', '.join(parts)})" if parts else ""

    def busiest_step(self) -> int:
        """The step with the most activity: the most blocks its events name (stores, loads, drops) plus one per
        event; ties go to the fuller pool, then to the earlier step. A static snapshot shows this step, not step 0
        (an empty pool)."""

        def activity(k: int) -> tuple[int, int, int]:
            record = self.recording.steps[k]
            moved = sum(1 + len(e.get("block_ids", [])) for e in record.get("events", []))
            used = sum(g["num_used_blocks"] for g in record["pool"]["groups"])
            return moved, used, -k

        return max(range(self.num_steps), key=activity)

    def store_state(self, req_id: str, since_step: int, step: int) -> tuple[int, int]:
        """(blocks in flight, blocks stored) at `step` of the request's stores from `since_step` on."""
        stored: set[int] = set()
        for k in range(since_step, step + 1):
            for e in self.recording.steps[k].get("events", []):
                if e.get("kind") == "store" and e.get("req_id") == req_id:
                    stored.update(e.get("block_ids", []))
        in_flight = {b for p in self.view(step).pools for b in p.in_flight_block_ids}
        return len(stored & in_flight), len(stored - in_flight)

    def _since_lookup(self, r: RequestView, v: StepView) -> str:
        # A miss reason is as of the lookup; say what the request's own stores did since, so "never_stored" is not
        # read as the state of a step where its store is being written.
        in_flight, done = self.store_state(r.req_id, r.as_of_step, v.step)
        if in_flight:
            return f"; since then: store in flight, {in_flight} blocks being written"
        if done:
            return f"; since then: stored, {done} blocks"
        return ""

    def pool_rows(self, step: int | None = None) -> list[dict[str, Any]]:
        """Tidy rows (step, group, state, num_blocks, lru_block_ids) for `pool.pool_occupancy_figure`.

        One row per group and state (evictable, pinned, in flight, other if any), then the shared free blocks as the
        row of group "free".
        """
        k = self.step if step is None else step
        if not 0 <= k < self.num_steps:
            raise ValueError(f"step: {k} is outside 0..{self.num_steps - 1}")
        pool = self.recording.steps[k]["pool"]  # not `view()`: the timeline reads every step, no request needed
        rows = []
        for p in (self._pool_view(entry) for entry in pool["groups"]):
            states = [("evictable", p.num_evictable), ("pinned", p.num_pinned), ("in flight", p.num_in_flight)]
            if p.num_other:
                states.append(("other", p.num_other))
            for state, n in states:
                rows.append(
                    {
                        "step": k,
                        "group": p.name,
                        "state": state,
                        "num_blocks": n,
                        "lru_block_ids": " ".join(map(str, p.lru_block_ids)),
                    }
                )
        rows.append(
            {"step": k, "group": "free", "state": "free", "num_blocks": pool["num_free_blocks"], "lru_block_ids": ""}
        )
        return rows

    def timeline_rows(self) -> list[dict[str, Any]]:
        """Pool counts at every step, for an occupancy-over-time figure."""
        return [row for k in range(self.num_steps) for row in self.pool_rows(k)]

    def all_boundary_rows(self, step: int | None = None) -> list[dict[str, Any]]:
        """`boundary_rows` of every request looked up by `step` (default: the last step); the selection is kept."""
        k = self.num_steps - 1 if step is None else step
        return [row for req_id in self.request_ids for row in self._rows_for(req_id, k)]

    def _rows_for(self, req_id: str, step: int) -> list[dict[str, Any]]:
        saved = self.req_id
        try:
            self.req_id = req_id
            return self.boundary_rows(step)
        finally:
            self.req_id = saved

    def boundary_rows(self, step: int | None = None) -> list[dict[str, Any]]:
        """Rows (req_id, group, boundary_tokens, joint_hit_tokens, prompt_tokens, miss_reason) for the lanes figure."""
        v = self.view(step)
        r = v.request
        if r is None:
            return []
        names = self.group_names
        in_flight, _ = self.store_state(r.req_id, r.as_of_step, v.step)
        note = " (a store is in flight now)" if in_flight else ""
        return [
            {
                "req_id": r.req_id,
                "group_id": i,
                "group": names[i],
                "boundary_tokens": b,
                "joint_hit_tokens": r.joint_hit_tokens,
                "prompt_tokens": r.prompt_tokens,
                "miss_reason": (r.miss_reasons[i] or "") + (note if r.miss_reasons[i] else ""),
            }
            for i, b in enumerate(r.boundaries)
        ]
