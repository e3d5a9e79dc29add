"""A tiny engine simulator that drives `OffloadManager` against `DeviceBlockPoolModel`.

Not vLLM: a deterministic stand-in with the same contracts, for tests, notebooks and benchmarks. Each step it looks
up (`lookup_for_load`: the connector's parking rule too) and admits waiting requests (no device prefix cache: local prefix 0), schedules one prefill chunk or one decode
token per running request, allocates device blocks per group, builds the manager's step, "executes" (hashes the
computed blocks, publishes Mamba-align boundary hand-offs for the next step, drops window blocks that left the
window), then lets the workers complete every copy (after `completion_delay_steps` steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.core.load.deferral import Deferred
from toolkit.core.manager import OffloadManager
from toolkit.core.metadata import StepMetadata
from toolkit.core.pool.device_pool import DeviceBlockPoolModel
from toolkit.core.pool.keys import BlockKey
from toolkit.core.requests import Handoff, RunningColumns, ScheduledRequest, SimpleRequest, StepInput
from toolkit.core.specs import GroupKind


def chain_hashes(token_ids: list[int], hash_tokens: int, *, seed: int = 0) -> list[int]:
    """Chained prefix hashes, one per full hash block (deterministic: Python hashes ints and tuples stably)."""
    out, parent = [], seed
    for start in range(0, len(token_ids) - hash_tokens + 1, hash_tokens):
        parent = hash((parent, tuple(token_ids[start : start + hash_tokens])))
        out.append(parent)
    return out


@dataclass
class SimRequest:
    view: SimpleRequest
    num_decode_tokens: int
    tables: list[list[int]]
    owned: list[int] = field(default_factory=list)
    num_sent_blocks: list[int] = field(default_factory=list)
    waiting_for_load: bool = False
    external_tokens: int = 0
    resumed: bool = False


class SimEngine:
    def __init__(
        self,
        manager: OffloadManager,
        device: DeviceBlockPoolModel,
        *,
        chunk_tokens: int = 512,
        max_running: int = 256,
        completion_delay_steps: int = 0,
        columns: bool = False,
    ) -> None:
        self.mgr, self.device = manager, device
        # `columns`: pass the requests scheduled before this step as `RunningColumns`, as the vLLM adapter does
        # (None for a request with no new block), so the manager's column path runs; default: all as
        # `ScheduledRequest`s. Both must give the same metadata.
        self.columns = columns
        self.geo = manager.geometry
        self.chunk_tokens = chunk_tokens
        self.max_running = max_running
        self.delay = completion_delay_steps
        self.waiting: list[SimRequest] = []
        self.running: dict[str, SimRequest] = {}
        self._handoffs: dict[str, list[Handoff]] = {}
        self.in_flight: list[tuple[int, StepMetadata]] = []  # (step it completes at, its metadata), oldest first
        self.num_steps = 0
        self.finished_ids: list[str] = []
        self.hit_tokens: dict[str, int] = {}
        self._preempted: set[str] = set()
        self._finished_now: set[str] = set()

    def add_request(self, request_id: str, token_ids: list[int], *, num_decode_tokens: int = 1) -> None:
        hashes = chain_hashes(token_ids, self.geo.hash_tokens)
        view = SimpleRequest(
            request_id=request_id, num_tokens=len(token_ids), num_prompt_tokens=len(token_ids), block_hashes=hashes
        )
        groups = self.geo.num_groups
        self.waiting.append(
            SimRequest(view, num_decode_tokens, [[] for _ in range(groups)], num_sent_blocks=[0] * groups)
        )

    # ----- blocks ---------------------------------------------------------------------------------------------

    def _grow(self, req: SimRequest, end_tokens: int) -> bool:
        """Make every group's table cover `end_tokens`; False if the device pool is too small."""
        need = []
        for group_id, block in enumerate(self.geo.group_block_tokens):
            need.append(max(0, -(-end_tokens // block) - len(req.tables[group_id])))
        if sum(need) > self.device.num_free_blocks:
            return False
        for group_id, count in enumerate(need):
            if count:
                new = self.device.allocate(count)
                req.owned.extend(new)
                req.tables[group_id].extend(new)
        return True

    def _hash_computed(self, req: SimRequest, start: int, end: int) -> None:
        """After computing tokens [start, end): register keys on the device as the engine's prefix cache would."""
        geo, hashes = self.geo, req.view.block_hashes
        hashed_end = len(hashes) * geo.hash_tokens
        for group_id, (group, block) in enumerate(zip(geo.groups, geo.group_block_tokens)):
            table = req.tables[group_id]
            if group.kind is GroupKind.MAMBA_ALIGN:
                boundary = min(end, hashed_end) // geo.hash_tokens * geo.hash_tokens
                tail = req.view.num_prompt_tokens // geo.hash_tokens * geo.hash_tokens
                if boundary > start and boundary == end and (boundary % block == 0 or boundary == tail):
                    state = table[-1]
                    key = BlockKey(group_id, hashes[boundary // geo.hash_tokens - 1])
                    if self.device.primary_key(state) is None:
                        self.device.cache_block(state, key)
                        self._handoffs.setdefault(req.view.request_id, []).append(Handoff(group_id, state, boundary))
                continue
            for index in range(start // block, min(end, hashed_end) // block):
                if index < len(table) and table[index] != 0 and self.device.primary_key(table[index]) is None:
                    self.device.cache_block(
                        table[index], BlockKey(group_id, hashes[(index + 1) * block // geo.hash_tokens - 1])
                    )
            if group.kind.scales_with_dcp and geo.fine_grained.enabled:
                tail = req.view.num_prompt_tokens // geo.hash_tokens * geo.hash_tokens
                if start < tail <= end and tail % block and tail // block < len(table):
                    self.device.add_alias(table[tail // block], BlockKey(group_id, hashes[tail // geo.hash_tokens - 1]))
            if group.kind is GroupKind.SLIDING_WINDOW:
                first_needed = max(0, end - (group.window - 1)) // block
                for index in range(first_needed):
                    if table[index] != 0:
                        req.owned.remove(table[index])
                        self.device.free([table[index]])
                        table[index] = 0

    # ----- the step -------------------------------------------------------------------------------------------

    def step(self) -> StepMetadata:
        mgr, geo = self.mgr, self.geo
        scheduled: list[ScheduledRequest] = []
        chunks: dict[str, int] = {}
        admitted: set[str] = set()  # first scheduled this step: never in the columns
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting[0]
            final_tokens = req.view.num_prompt_tokens + req.num_decode_tokens
            external = mgr.lookup_for_load(req.view, 0, final_tokens=final_tokens)
            if isinstance(external, Deferred):
                break  # its load waits (the parked loads to compute, or CPU room for its disk blocks); FCFS
            if not self._grow(req, external + 1):
                break
            self.waiting.pop(0)
            self.running[req.view.request_id] = req
            admitted.add(req.view.request_id)
            self.hit_tokens[req.view.request_id] = external
            plan = mgr.prepare_load(req.view, req.tables, external)
            if plan is not None and not plan.declined:
                req.waiting_for_load = True
                req.external_tokens = external
        for req in self.running.values():
            view = req.view
            if req.waiting_for_load:
                continue
            remaining_prompt = view.num_prompt_tokens - view.num_computed_tokens
            chunk = min(self.chunk_tokens, remaining_prompt) if remaining_prompt > 0 else 1
            tail = view.num_prompt_tokens // geo.hash_tokens * geo.hash_tokens
            if view.num_computed_tokens < tail < view.num_computed_tokens + chunk:
                chunk = tail - view.num_computed_tokens  # end a chunk on the last prompt boundary (Mamba align)
            if not self._grow(req, view.num_computed_tokens + chunk):
                chunk = 0
            chunks[view.request_id] = chunk
        column_ids: list[str] = []
        column_new_ids: list[tuple[tuple[int, ...], ...] | None] = []
        column_resumed: set[str] = set()
        for req in self.running.values():
            new_ids = tuple(tuple(t[n:]) for t, n in zip(req.tables, req.num_sent_blocks))
            req.num_sent_blocks = [len(t) for t in req.tables]
            request_id = req.view.request_id
            if self.columns and request_id not in admitted:
                column_ids.append(request_id)
                column_new_ids.append(new_ids if any(new_ids) or req.resumed else None)
                if req.resumed:
                    column_resumed.add(request_id)
            else:
                scheduled.append(
                    ScheduledRequest(
                        request=req.view,
                        new_block_ids=new_ids,
                        resumed=req.resumed,
                        num_scheduled_tokens=chunks.get(request_id, 0),
                    )
                )
            req.resumed = False
        running = None
        if column_ids:
            views = {request_id: self.running[request_id].view for request_id in column_ids}
            running = RunningColumns(column_ids, column_new_ids, chunks, column_resumed, views)
        handoffs, self._handoffs = self._handoffs, {}
        preempted, self._preempted = frozenset(self._preempted), set()
        finished_now, self._finished_now = frozenset(self._finished_now), set()
        meta = mgr.build_step(
            StepInput(
                scheduled=tuple(scheduled),
                handoffs=handoffs,
                preempted_request_ids=preempted,
                finished_request_ids=finished_now,
                running=running,
            )
        )
        if meta.load is not None or meta.store is not None:  # nothing else completes (an idle step waits for none)
            self.in_flight.append((self.num_steps + self.delay, meta))
        finished = []
        for request_id, chunk in chunks.items():
            req = self.running[request_id]
            view = req.view
            start = view.num_computed_tokens
            view.num_computed_tokens += chunk
            if view.num_computed_tokens > view.num_prompt_tokens:
                view.num_tokens = max(view.num_tokens, view.num_computed_tokens + 1)
            self._hash_computed(req, start, view.num_computed_tokens)
            if view.num_computed_tokens >= view.num_prompt_tokens + req.num_decode_tokens:
                finished.append(req)
        self._complete(self.num_steps)
        for req in finished:
            mgr.request_finished(req.view, req.tables)
            del self.running[req.view.request_id]
            self.device.free(list(reversed(req.owned)))
            self.finished_ids.append(req.view.request_id)
        self.num_steps += 1
        return meta

    def preempt(self, request_id: str) -> bool:
        """Preempt a running request (not one waiting for a load): free its blocks, recompute later."""
        req = self.running.get(request_id)
        if req is None or req.waiting_for_load:
            return False
        del self.running[request_id]
        self.device.free(list(reversed(req.owned)))
        req.owned, req.tables = [], [[] for _ in req.tables]
        req.num_sent_blocks = [0] * len(req.tables)
        req.view.num_computed_tokens = 0
        req.resumed = True
        self._preempted.add(request_id)
        self.waiting.insert(0, req)
        return True

    def abort(self, request_id: str) -> bool:
        """Finish a running request now (as a client abort would)."""
        req = self.running.pop(request_id, None)
        if req is None:
            return False
        self.mgr.request_finished(req.view, req.tables)
        self.device.free(list(reversed(req.owned)))
        self.finished_ids.append(request_id)
        self._finished_now.add(request_id)
        return True

    def _complete(self, now: int) -> None:
        ready = [meta for due, meta in self.in_flight if due <= now]
        self.in_flight = [(due, meta) for due, meta in self.in_flight if due > now]
        world = self.mgr.config.world_size
        for meta in ready:
            if meta.store is not None:
                self.mgr.complete_stores({meta.store.event_id: world})
            if meta.disk is not None:  # every disk read lands with the step's other copies
                self.mgr.complete_disk({meta.disk.event_id: world})
            if meta.load is not None:
                request_ids = list(meta.load_event_to_req_ids.get(meta.load.event_id, ()))
                self.mgr.complete_loads(request_ids)
                for request_id in request_ids:
                    req = self.running.get(request_id)
                    if req is not None and req.waiting_for_load:
                        req.waiting_for_load = False
                        req.view.num_computed_tokens = req.external_tokens

    def run_until_idle(self, max_steps: int = 100_000) -> None:
        while (self.waiting or self.running or self.in_flight or self.mgr.has_pending_work()) and max_steps:
            self.step()
            max_steps -= 1
