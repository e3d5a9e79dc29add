"""Record a cache-state run: drive the core `OffloadManager` through a synthetic trace and write the recording.

The engine is the core's `SimEngine` over `DeviceBlockPoolModel` (no vLLM, no torch): each step the recorder
adds the requests due, runs one engine step, then writes the manager's `snapshot()`, the step's lookups (with
per-group reach and miss reasons, from a subscriber of `toolkit.core.observer`) and its `take_step_events()`,
normalised to the `kvtk.cache_state/1` schema of `toolkit.viz.recording`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from toolkit.core import events as ev
from toolkit.core.events import ManagerEvent
from toolkit.core.observer import OffloadObserver, subscribe
from toolkit.viz.recording import SCHEMA, Recording, dump_recording, from_records
from toolkit.workloads.cache_state import cache_state_prompts
from toolkit.workloads.traces import Trace

DEFAULT_GROUPS = "full_attention:16,sliding_window:16/32,mamba_align:64"

SHORT_NAMES = {
    "full_attention": "attn",
    "mla": "mla",
    "sliding_window": "swa",
    "chunked_local": "chunked",
    "mamba_align": "mamba",
    "mamba_all": "mamba",
}


class _StepLookups(OffloadObserver):
    """The lookups of the current step, with per-group reach and reasons (the recorder clears it each step)."""

    needs_lookup_diagnosis = True

    def __init__(self) -> None:
        self.lookups: list[tuple[str, Any]] = []

    def on_lookup(self, request_id, local_tokens, result) -> None:
        self.lookups.append((request_id, result))


def _due_by_step(trace: Trace, arrival_every_steps: int) -> dict[int, list[tuple[str, list[int]]]]:
    """Engine step -> the (request id, prompt token ids) added before it: request i before step
    `i * arrival_every_steps`."""
    due: dict[int, list[tuple[str, list[int]]]] = {}
    for i, request in enumerate(trace.requests):
        due.setdefault(i * arrival_every_steps, []).append((request.request_id, trace.prompt_token_ids(request)))
    return due


def record_synthetic_run(
    path: str | Path | None = None,
    *,
    num_steps: int = 30,
    groups: str = DEFAULT_GROUPS,
    hash_block_tokens: int | None = 16,
    num_cpu_blocks: int = 40,
    num_device_blocks: int = 96,
    num_requests: int = 8,
    segment_tokens: int = 40,
    arrival_every_steps: int = 3,
    chunk_tokens: int = 64,
    num_decode_tokens: int = 2,
    completion_delay_steps: int = 1,
    lazy: bool = False,
    fine_grained: bool = True,
) -> Path | Recording:
    """Run the synthetic trace for `num_steps` steps; write the recording to `path` (returned) or return it.

    Deterministic: the same arguments give the same recording. `fine_grained=False` builds the geometry with
    fine-grained hits off, so lookups stop on scheduler blocks (the block-aligned baseline). The prompts are the
    `cache-state` workload (`toolkit.workloads.cache_state`).
    """
    from toolkit.core import DeviceBlockPoolModel, HybridGeometry, OffloadConfig, OffloadManager, parse_groups_spec
    from toolkit.core.sim import SimEngine

    geo = HybridGeometry(
        groups=parse_groups_spec(groups), hash_block_tokens=hash_block_tokens, allow_fine_grained=fine_grained
    )
    device = DeviceBlockPoolModel(num_device_blocks)
    mgr = OffloadManager(
        geometry=geo, device_pool=device, config=OffloadConfig(num_cpu_blocks=num_cpu_blocks, lazy=lazy)
    )
    engine = SimEngine(mgr, device, chunk_tokens=chunk_tokens, completion_delay_steps=completion_delay_steps)
    lookups = subscribe(mgr, _StepLookups()).lookups  # the step's lookups (per-group reach and reasons on)
    due = _due_by_step(
        cache_state_prompts(num_requests=num_requests, segment_tokens=segment_tokens), arrival_every_steps
    )
    source = (
        f"toolkit.viz.recorder.record_synthetic_run(groups={groups!r}, num_cpu_blocks={num_cpu_blocks}, "
        f"num_requests={num_requests}, num_steps={num_steps}, lazy={lazy}, fine_grained={fine_grained})"
    )
    header = _header(mgr, num_cpu_blocks, source, [(r, t) for step in due.values() for r, t in step])
    steps = []
    for k in range(num_steps):
        for req_id, tokens in due.get(k, []):
            engine.add_request(req_id, tokens, num_decode_tokens=num_decode_tokens)
        engine.step()
        steps.append(_step_record(k, mgr, lookups))
        lookups.clear()
    recording = from_records([header, *steps], where="synthetic run")
    if path is None:
        return recording
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_recording(recording, path)
    return path


def _header(mgr, num_cpu_blocks: int, source: str, prompts: list[tuple[str, list[int]]]) -> dict:
    """The recording's header: pool size, geometry, group names (`attn`, `mamba0`, ...) and the requests."""
    geo = mgr.geometry
    return {
        "type": "header",
        "schema": SCHEMA,
        "num_cpu_blocks": mgr.snapshot()["num_free_blocks"],
        "num_reserved_blocks": num_cpu_blocks - mgr.snapshot()["num_free_blocks"],  # the null block
        "source": source,
        "geometry": geo.describe(),
        "groups": header_groups(geo),
        "requests": [{"req_id": req_id, "prompt_tokens": len(tokens)} for req_id, tokens in prompts],
    }


def header_groups(geo) -> list[dict]:
    """The header's groups: id, short name (`attn`, `mamba0`, `mamba1`, ...), kind and block tokens."""
    short = [SHORT_NAMES.get(g.kind.value, g.kind.value) for g in geo.groups]
    names = [f"{s}{short[:i].count(s)}" if short.count(s) > 1 else s for i, s in enumerate(short)]
    return [
        {"group_id": i, "name": names[i], "kind": g.kind.value, "block_tokens": b}
        for i, (g, b) in enumerate(zip(geo.groups, geo.group_block_tokens))
    ]


def _step_record(k: int, mgr, lookups: list) -> dict:
    """Step `k`'s record: the pool after it, its normalised events and its lookups."""
    return {
        "type": "step",
        "step": k,
        "pool": pool_entry(mgr.snapshot()),
        "events": normalise_events(mgr.take_step_events()),
        "requests": [lookup_entry(req_id, r, mgr.geometry.num_groups) for req_id, r in lookups],
    }


def pool_entry(snap: dict) -> dict:
    """A manager `snapshot()` as the recording's pool entry (free: blocks holding no data)."""
    # The core counts evictable blocks as free (vLLM's free queue holds them); the recording's free blocks hold no data.
    num_evictable = sum(len(g["lru_block_ids"]) for g in snap["groups"])
    return {
        "num_free_blocks": snap["num_free_blocks"] - num_evictable,
        "groups": [_group_entry(g) for g in snap["groups"]],
    }


def _group_entry(g: dict) -> dict:
    in_flight = set(g["in_flight_block_ids"])  # a block being written is shown in flight, not pinned
    return {
        "group_id": g["group_id"],
        "num_used_blocks": g["num_used_blocks"],
        "lru_block_ids": g["lru_block_ids"],
        "pinned_block_ids": [b for b in g["pinned_block_ids"] if b not in in_flight],
        "in_flight_block_ids": g["in_flight_block_ids"],
    }


def lookup_entry(req_id: str, result, num_groups: int) -> dict:
    """A lookup (its `LookupResult`, diagnosed) as the recording's request entry."""
    joint = result.local_tokens + result.hit_tokens
    reach = result.group_reach_tokens or (result.hit_tokens,) * num_groups
    reasons = list(result.group_miss_reasons) or [None] * num_groups
    return {
        "req_id": req_id,
        "joint_hit_tokens": joint,
        # a group's reach is never below the joint hit; max() guards a reach reported before clamping
        "boundaries": [max(joint, result.local_tokens + r) for r in reach],
        "miss_reason": result.miss_reason.value,
        "miss_reasons": [r.value if r is not None else None for r in reasons],
    }


def normalise_events(events: list[ManagerEvent]) -> list[dict]:
    """The manager's typed events -> recording events (one per kind, request and group; evictions merged per group)."""
    out: list[dict] = []
    drops: dict[tuple[int, str], list[int]] = defaultdict(list)
    for e in events:
        if isinstance(e, ev.StoreSent):
            per_group: dict[int, list[int]] = defaultdict(list)
            for cpu_id, gid in zip(e.cpu_block_ids, e.group_ids):
                per_group[gid].append(cpu_id)
            reqs = ",".join(e.request_ids) or None
            sources = ",".join(sorted(set(e.sources))) or None
            out.extend(_ev("store", reqs, gid, ids, sources) for gid, ids in sorted(per_group.items()))
        elif isinstance(e, ev.LoadSent):
            out.append(_ev("load", ",".join(e.request_ids) or None, None, list(e.cpu_block_ids), None))
        elif isinstance(e, ev.HandoffTaken):
            out.append(_ev("handoff", e.request_id, e.group_id, [], f"{e.outcome} at {e.boundary_tokens} tokens"))
        elif isinstance(e, ev.CpuBlockKeysGone):
            drops[(e.group_id, "evicted" if isinstance(e, ev.BlockEvicted) else "keys dropped")].append(e.cpu_block_id)
        elif isinstance(e, ev.LookupDone):
            reason = f"hit {e.hit_tokens} after {e.local_tokens} local, miss {e.miss_reason}"
            out.append(_ev("lookup", e.request_id, e.limiting_group_id, [], reason))
        elif isinstance(e, ev.LoadDeclined):
            out.append(
                _ev("drop", e.request_id, None, [], f"load declined: {e.reason}" if e.reason else "load declined")
            )
        elif isinstance(e, ev.LoadFailed):
            out.append(_ev("drop", e.request_id, None, [], "load failed"))
        elif isinstance(e, ev.StoreDone):
            state = "failed" if e.failed else f"{e.num_cached_blocks} cached"
            out.append(_ev("complete", None, None, [], f"store event {e.event_id}: {state}"))
        elif isinstance(e, ev.LoadDone):
            out.append(_ev("complete", e.request_id, None, [], "load complete"))
        else:
            out.append(_ev(e.kind, None, None, [], None))
    for (gid, why), ids in sorted(drops.items()):
        out.append(_ev("drop", None, gid if gid is not None and gid >= 0 else None, ids, why))
    return out


def _ev(kind: str, req_id: str | None, group_id: int | None, block_ids: list[int], reason: str | None) -> dict:
    return {"kind": kind, "req_id": req_id, "group_id": group_id, "block_ids": list(block_ids), "reason": reason}
