"""The `dry` engine: vLLM's real scheduler and KV cache manager with a connector, no model (fabricated outputs).

Built on `toolkit.engines.harness.Harness` with the ``instant`` worker: every transfer completes at the end of its
step as far as the scheduler can tell; a virtual clock (`clock.py`) times arrivals, steps (the step-time model of
`step_time.py`) and copies on the PCIe link, so each request gets a modelled queueing time, TTFT and end-to-end
time. Requests are fed through a bounded window (`window` requests in flight) so traces of 10^5
requests stay small in memory. By default (`window=None`) a phase whose requests carry no arrival times (all 0)
is fed by `clients.DEFAULT_CLIENTS` (one) closed-loop client, the live engine's default (`clients.clients_for`):
the next request enters (and arrives: latencies count from sending) when the previous one has finished, so the dry
engine predicts the live engine's hits per request (a wider window lets a session's next turn be looked up before
the turn it extends has been answered, turning device-local hits into CPU-tier loads). A phase with arrival times
is fed open loop, up to `OPEN_LOOP_WINDOW` in flight; `concurrency=N` by N closed-loop clients (`clients.py`).
Shapes: the harness's tiny shapes, or a real model's layout from `geometry_layout.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from toolkit.engines.base import Engine, LazyPrompt, PhaseRequest, ResetRefused, VariantSpec
from toolkit.engines.disk_columns import PhaseDiskColumns
from toolkit.engines.facts import EngineFacts
from toolkit.engines.geometry_layout import dry_layout
from toolkit.engines.harness.stall import StallWatch
from toolkit.engines.progress_guard import STALL_STEPS, check_requests
from toolkit.engines.records import (
    RequestRecord,
    connector_manager,
    connector_observations,
    make_record,
    with_observations,
)
from toolkit.engines.vllm_layout import block_bytes, layout_facts
from toolkit.errors import BadInput
from toolkit.scoped_env import scoped_env
from toolkit.vllm.hints import PhaseHintColumns, to_envelope

if TYPE_CHECKING:
    from toolkit.core.load.from_disk import DiskCascade, DiskHitCost
    from toolkit.engines.decode_stretch import DecodeStretch
    from toolkit.engines.dry_hashing import PromptBlockHashes
    from toolkit.engines.harness import Harness
    from toolkit.engines.harness.driver import RequestRecord as HarnessRecord
    from toolkit.engines.layout import Layout
    from toolkit.perfmodel.clock import VirtualClock
    from toolkit.perfmodel.step_time import StepModel
    from toolkit.workloads.clients import ClosedLoop

# Host<->device copy bandwidth for the transfer-time model (bytes/s); pinned-memory PCIe Gen4 class numbers.
DEFAULT_LOAD_BYTES_PER_S = 20e9
DEFAULT_STORE_BYTES_PER_S = 20e9
OPEN_LOOP_WINDOW = 64  # requests in flight at most when a phase has arrival times (bounds memory on long traces)
PREFILL_RATE_TOKENS = 8192  # the disk cost's recompute rate: one prompt of this many tokens alone on the step model
DRAIN_TIMEOUT_S = 60.0  # reset_device_cache steps the harness at most this long before resetting


def _long_model_len_env(max_model_len: int) -> dict[str, str]:
    """Dry runs replay prompts longer than the tiny models' 8192 positions: no weights run, so vLLM may allow it
    (its config check reads the variable while the harness builds its config; restored after)."""
    return {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"} if max_model_len > 8192 else {}


class DryEngine(Engine):
    """One variant on one harness; caches (device and CPU tier) persist across phases."""

    _disk_columns: PhaseDiskColumns | None = None  # the disk tier's phase columns, made by the first phase_extra

    def __init__(
        self,
        spec: VariantSpec,
        *,
        model: str,
        cpu_bytes: int,
        num_gpu_blocks: int,
        prefix_match_unit: int | None,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 8192,
        max_model_len: int = 8192,
        shape: Layout | None = None,
        window: int | None = None,
        step_model: StepModel | None = None,
        load_bytes_per_s: float = DEFAULT_LOAD_BYTES_PER_S,
        store_bytes_per_s: float = DEFAULT_STORE_BYTES_PER_S,
        device_bytes: int | None = None,
        tp: int = 1,
        dcp: int = 1,
        platform: str = "cuda",
        dtype: str = "auto",
        step_by_step: bool = False,
        speculative: dict[str, Any] | None = None,
        disk_bytes: int = 0,
        disk_time: Callable[[int, int], Callable[[int, float, int], float]] | None = None,
        disk_cost: Callable[[int, int, float], DiskHitCost] | None = None,
        disk_write_policy: str = "write-back",
        disk_groups: str = "all",
        shared_store_bytes: int = 0,
        shared_store_cost: Callable[[int, int, float], DiskHitCost] | None = None,
    ) -> None:
        """`model`: a tiny model (the harness's shapes) or a preset of `data/models` (its vLLM layout on `platform`
        at TP `tp` and DCP `dcp`, `geometry_layout.py`); `device_bytes` (KV bytes per rank) replaces `num_gpu_blocks`;
        `cpu_bytes`: the server-wide tier, split over the TP ranks as the connector splits it; `speculative`: the
        drafter (`Harness`). `step_by_step`: every step through vLLM's scheduler (the reference); by default quiet
        decode stretches go in one call each (`decode_stretch.py`), with the same answers. `disk_bytes`: a disk tier
        below the toolkit connector's CPU tier (0: none), timed by `disk_time` (`experiments.disk_time`);
        `disk_cost`: its hits weighed against recomputing at the step model's prefill rate (`DiskCascade.weigh`;
        None: every disk hit is loaded). `shared_store_bytes`: a shared store below that disk (server-wide, 0: none;
        `DiskCascade.attach_store`), its reads timed by `disk_time`'s third argument, weighed by `shared_store_cost`."""
        shape = shape if shape is not None else dry_layout(model, tp=tp, dcp=dcp, platform=platform, dtype=dtype)
        if device_bytes is not None:
            num_gpu_blocks = shape.device_blocks(device_bytes)
        self.model, self.layout, self.spec, self.cpu_bytes = model, shape, spec, cpu_bytes
        if window is not None and window < 1:
            raise BadInput(f"window: must be >= 1 request in flight, got {window}")
        self.window = window  # None: closed loop without arrival times, else open loop (see the module docstring)
        self.step_model = step_model  # `perfmodel.step_time` model of the clock; None: the model's default
        self.load_bytes_per_s = load_bytes_per_s
        self.store_bytes_per_s = store_bytes_per_s
        self.step_by_step = step_by_step
        self.disk_bytes, self._disk_time, self._disk_cost = disk_bytes, disk_time, disk_cost
        self.disk_write_policy, self.disk_groups = disk_write_policy, disk_groups
        self.shared_store_bytes, self._store_cost = shared_store_bytes, shared_store_cost
        self._store_loads: dict[str, int] = {}  # the last scheduled step's store blocks per request (`_take_lower`)
        self._harness: Harness | None = self._start_harness(
            shape,
            num_gpu_blocks=num_gpu_blocks,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            prefix_match_unit=prefix_match_unit,
            speculative=speculative,
        )
        self.block_bytes = block_bytes(self.harness.kv_cache_config)
        self._attach_store()
        self._clock: VirtualClock | None = None  # made by the first phase (`_virtual_clock`), its model set by then
        self._stretch: DecodeStretch | None = None  # the decode-stretch fast path, made by the first phase using it
        self.clients: ClosedLoop[PhaseRequest] | None = None  # the last phase's (tests read how many were in flight)
        # vLLM's own per-request prefill hits, read right after schedule() (`_read_prefill_hits`).
        self._hits: dict[str, tuple[int, int]] = {}
        self.harness.step_listeners.append(self._read_prefill_hits)
        # Per-request lookups, loads and stores from the toolkit connector's own scheduler side (None otherwise).
        self.observations = connector_observations(self.harness.connector)
        self._hint_columns = PhaseHintColumns()

    def phase_extra(self, phase: str) -> dict[str, Any]:
        """The KV hints' columns (`vllm.hints.PhaseHintColumns`: none when no hint arrived) and the disk tier's
        (`disk_columns.PhaseDiskColumns`: none without one)."""
        columns = self._hint_columns.take(self.harness.connector)
        if self._disk_columns is None:
            self._disk_columns = PhaseDiskColumns(self.block_bytes, self._ranks)
        columns.update(self._disk_columns.take(self._disk()))
        return columns

    def _attach_store(self) -> None:
        """The modelled shared store below the disk tier, in blocks per rank of the CPU tier's size."""
        manager = self.offload_manager()
        if not self.shared_store_bytes or manager is None or manager.disk is None:
            return
        num_blocks = self.shared_store_bytes // self._ranks // self.block_bytes
        if num_blocks < 1:
            raise BadInput(
                f"store_gib: {self.shared_store_bytes / 2**30:g} GiB holds no block of {self.block_bytes} bytes"
            )
        manager.attach_store(num_blocks)

    def _take_lower(self) -> dict[str, int]:
        """The step hook's disk loads (blocks per request, taken right after `schedule()`); the store's bytes of the
        step's loads are kept for the clock (`_take_store_bytes`), as the hook keeps the disk's."""
        disk = self._disk()
        assert disk is not None
        loads = self.harness.loaded_pairs_last_step
        store = disk.take_store_load_blocks()
        self._store_loads = {r: n * self.block_bytes for r, n in store.items() if loads.get(r)}
        return disk.take_load_blocks()

    def _take_store_bytes(self) -> dict[str, int] | None:
        """The last step's loads' bytes read from the store first, per request (None without a store)."""
        if not self.shared_store_bytes:
            return None
        store, self._store_loads = self._store_loads, {}
        return store

    @property
    def _ranks(self) -> int:
        return int(self.harness.vllm_config.parallel_config.world_size)

    def _disk(self) -> DiskCascade | None:
        manager = self.offload_manager()
        return manager.disk if manager is not None else None

    def offload_manager(self) -> Any | None:
        return connector_manager(self.harness.connector)

    def _start_harness(self, shape: Layout, *, num_gpu_blocks: int, max_model_len: int, **limits: Any) -> Harness:
        """The harness with the instant worker, and vLLM's block hasher replaced by the same hashes made faster."""
        from toolkit.engines.harness import Harness

        with scoped_env(**_long_model_len_env(max_model_len)):
            harness = Harness(
                shape,
                connector=self.spec.connector,
                extra_config=self._extra_config(),
                num_gpu_blocks=num_gpu_blocks,
                worker="instant",
                max_model_len=max_model_len,
                **limits,
            )
        self._prompt_hashes: PromptBlockHashes | None = None
        if not self.step_by_step:
            from toolkit.engines.dry_hashing import install_plain_hasher

            self._prompt_hashes = install_plain_hasher(harness)
        return harness

    def _extra_config(self) -> dict[str, Any]:
        extra = self.spec.connector_extra_config(self.cpu_bytes)
        if self.disk_bytes and self.spec.connector == "toolkit":
            extra["disk_bytes_to_use"] = int(self.disk_bytes)
            extra["disk_write_policy"] = self.disk_write_policy
            extra["disk_groups"] = self.disk_groups
        return extra

    def _read_prefill_hits(self, scheduler_output: Any) -> None:
        """vLLM's per-request prefill stats: set when a prefill is first scheduled, taken in `update_from_output`
        of the same step, so read here, right after `schedule()` (the harness's step listener)."""
        from toolkit.vllm.adapters import prefill_hit_tokens

        requests, hits = self.harness.scheduler.requests, self._hits
        for req_id in scheduler_output.num_scheduled_tokens:
            if req_id not in hits:
                found = prefill_hit_tokens(requests.get(req_id))
                if found is not None:
                    hits[req_id] = found

    def describe(self) -> EngineFacts:
        h = self.harness
        parallel = h.vllm_config.parallel_config
        return EngineFacts(
            engine="dry",
            variant=self.spec.describe(),
            model=self.model,
            model_dtype=self.layout.model_dtype,
            tp=parallel.tensor_parallel_size,
            dcp=parallel.decode_context_parallel_size,
            hash_block_tokens=h.hash_block_tokens,
            scheduler_block_tokens=h.scheduler_block_tokens,
            prefix_match_unit=h.vllm_config.cache_config.prefix_match_unit,
            **layout_facts(h.kv_cache_config, h.scheduler_block_tokens),
            cpu_bytes=self.cpu_bytes,
            cpu_block_bytes=self.block_bytes,
            cpu_blocks=self.cpu_bytes // parallel.world_size // self.block_bytes,
            load_bytes_per_s=self.load_bytes_per_s,
            store_bytes_per_s=self.store_bytes_per_s,
        )

    def run_phase(
        self,
        phase: str,
        requests: list[PhaseRequest],
        *,
        progress: bool = False,
        concurrency: int | None = None,
        after: Mapping[str, str] | None = None,
    ) -> list[RequestRecord]:
        """Feed requests in trace order through the window as they arrive on the virtual clock; step to the end.

        A request enters when the clock has reached its arrival (phase start + `arrival_s`) and fewer than `window`
        requests are in flight; when nothing is in flight the clock jumps to the next arrival. Every step advances
        the clock by the step-time model (`clock.py`, `step_time.py`), so traces without arrival times (all 0)
        are fed exactly as before and the clock only times them. With `concurrency`, the phase (no arrival times)
        is fed by that many closed-loop clients instead (`clients.ClosedLoop`; `after`: each request's previous
        turn, `clients.previous_turns`), a request arriving when a client sends it.
        """
        from toolkit.progress import progress_bar
        from toolkit.workloads.clients import ClosedLoop, clients_for

        check_requests(self.harness, [(r.request_id, len(r.prompt_token_ids), r.max_tokens) for r in requests])
        clock = self._virtual_clock()
        # The live engine's modes (`clients_for`); an explicit `window` is open loop (`kvtk bench dry`).
        num_clients = clients_for(requests, concurrency) if self.window is None else concurrency
        clients = ClosedLoop(requests, num_clients, after) if num_clients else None
        self.clients = clients
        bar = progress_bar(total=len(requests), desc=f"{self.spec.name}:{phase}", enabled=progress)
        finished = self._step_through(phase, requests, clients, clock, bar)
        bar.close()
        return [self._record(phase, req, finished[f"{phase}:{req.request_id}"], clock) for req in requests]

    def _step_through(
        self,
        phase: str,
        requests: list[PhaseRequest],
        clients: ClosedLoop[PhaseRequest] | None,
        clock: VirtualClock,
        bar: Any,
    ) -> dict[str, HarnessRecord]:
        """The step loop: admit what the window (or the clients) let in, step the harness (or advance a quiet
        decode stretch in one go), collect what finished. Returns the harness's record of each request, by key."""
        h = self.harness
        hook = self._clock_hook
        stretch = None if self.step_by_step else self._decode_stretch(clock.model)
        phase_start_s = clock.now_s
        pending = list(reversed(requests))
        timed = any(r.arrival_s for r in requests)
        window = self.window or OPEN_LOOP_WINDOW
        in_flight: set[str] = set()
        records: dict[str, HarnessRecord] = {}
        watch = StallWatch(STALL_STEPS, "dry engine")
        while (not clients.done if clients else pending) or h.busy:
            if clients is not None:
                for req in clients.take():
                    in_flight.add(self._send(phase, req, clock.now_s, clock))
            while (
                clients is None
                and pending
                and len(in_flight) < window
                and phase_start_s + pending[-1].arrival_s <= clock.now_s
            ):
                req = pending.pop()
                # Open loop: a request arrives at its time (and waits from then while the window holds it back);
                # an explicit window without arrival times sends a request when a slot frees, as a client would.
                sent_s = phase_start_s + req.arrival_s if timed else clock.now_s
                in_flight.add(self._send(phase, req, sent_s, clock))
            if not in_flight and not h.busy:
                clock.wait_until(phase_start_s + pending[-1].arrival_s)  # idle until the next arrival
                continue
            if stretch is not None:
                skippable = stretch.steps_possible(hook)
                if skippable:
                    # The loop above admits a pending arrival once the clock reaches it (while the window has room).
                    limit = (
                        phase_start_s + pending[-1].arrival_s
                        if (clients is None and pending and len(in_flight) < window)
                        else None
                    )
                    if stretch.advance(clock, skippable, limit):
                        continue
            watch.step(h.step().num_scheduled_tokens, h.scheduler.get_num_unfinished_requests)
            clock.end_step(hook.take(), hook.take_disk_loads(), self._take_store_bytes())
            done = [r for r in h.finished_last_step if r in in_flight]
            for req_id in done:
                in_flight.discard(req_id)
                records[req_id] = h.requests.pop(req_id)
                clock.finish(req_id)
                if clients is not None:
                    clients.finish(req_id.split(":", 1)[1])
            bar.update(len(done))
        return records

    def _send(self, phase: str, req: PhaseRequest, arrival_s: float, clock: VirtualClock) -> str:
        """Add one request to the harness, arriving at `arrival_s` on the clock; returns its key."""
        # vLLM and connectors keep per-request state past the finish: ids must be unique per run.
        key = f"{phase}:{req.request_id}"
        prompt = req.prompt_token_ids
        if self._prompt_hashes is not None:
            self._expect_block_ids(self._prompt_hashes, key, prompt)
        tokens = prompt.tokens() if isinstance(prompt, LazyPrompt) else prompt  # a lazy prompt: made once, here
        hints = to_envelope(req.kv_hints) if req.kv_hints is not None else None
        self.harness.add(key, tokens, req.max_tokens, owned=isinstance(prompt, LazyPrompt), kv_hints=hints)
        clock.arrive(key, arrival_s)
        return key

    def _expect_block_ids(self, hashes: PromptBlockHashes, key: str, prompt: Sequence[int]) -> None:
        """A prompt of whole blocks (a Mooncake prompt, `LazyPrompt.blocks`): tell the hasher its block ids."""
        blocks = prompt.blocks() if isinstance(prompt, LazyPrompt) else None
        if blocks is not None and hashes.accepts(blocks.block_tokens):
            hashes.expect(key, blocks.block_ids, blocks.block_tokens, blocks.tokens_key)

    def _record(self, phase: str, req: PhaseRequest, rec: HarnessRecord, clock: VirtualClock) -> RequestRecord:
        """One request's record: vLLM's hits, the connector's observations, the clock's times."""
        key = f"{phase}:{req.request_id}"
        local, external = self._hits.pop(key, (0, 0))
        seen = self.observations.take(key) if self.observations is not None else {}
        # vLLM's own connector: what the harness observed (loaded pairs, `store_count`), at the same block bytes.
        harness_bytes = (len(rec.loaded_pairs) * self.block_bytes, rec.stored_blocks * self.block_bytes)
        times = clock.take(key)
        record = make_record(
            self.spec.name,
            phase,
            req.request_id,
            rec.prompt_tokens,
            local,
            external,
            num_output_tokens=len(rec.output_tokens),  # its decode steps, timed on the clock: TPOT (modelled)
        )
        return with_observations(record, seen, harness_bytes, times.queue_s, times.ttft_s, times.e2e_s)

    @property
    def max_model_len(self) -> int:
        return int(self.harness.vllm_config.model_config.max_model_len)

    @property
    def num_skipped_steps(self) -> int:
        """Decode steps the decode stretches advanced without vLLM's scheduler (0 step by step)."""
        return self._stretch.num_skipped_steps if self._stretch is not None else 0

    def _decode_stretch(self, step_model: StepModel) -> DecodeStretch:
        if self._stretch is None:
            from toolkit.engines.decode_stretch import DecodeStretch

            self._stretch = DecodeStretch(self.harness, step_model)
        return self._stretch

    def _virtual_clock(self) -> VirtualClock:
        """The engine's clock (kept across phases) and the scheduler hook that reports each step's work."""
        clock = self._clock
        if clock is None:
            from toolkit.engines.step_hook import StepHook
            from toolkit.perfmodel.clock import VirtualClock
            from toolkit.perfmodel.step_time import build_clock_model

            # The engine's model name (a preset's, not the tiny model standing in for its vLLM config).
            model = self.step_model or build_clock_model(self.model)
            self.step_model = model
            disk = self._disk()
            take_disk = (
                (self._take_lower if self.shared_store_bytes else disk.take_load_blocks) if disk is not None else None
            )
            self._clock_hook = StepHook(self.harness, self.block_bytes, disk_load_blocks=take_disk)
            staged = self._disk_time(self.block_bytes, self._ranks) if disk is not None and self._disk_time else None
            clock = self._clock = VirtualClock(model, staged_load_s=staged)
            prefill_s = getattr(model, "prefill_seconds", None)  # none: steps take no time, recomputing is free
            if disk is not None and self._disk_cost is not None and prefill_s is not None:
                tokens_per_s = PREFILL_RATE_TOKENS / prefill_s(PREFILL_RATE_TOKENS)
                disk.cost = self._disk_cost(self.block_bytes, self._ranks, tokens_per_s)
                if self._store_cost is not None:
                    disk.store_cost = self._store_cost(self.block_bytes, self._ranks, tokens_per_s)
        return clock

    @property
    def clock(self) -> VirtualClock | None:
        """The virtual clock, kept across phases (None before the first phase)."""
        return self._clock

    def virtual_now_s(self) -> float | None:
        return self._clock.now_s if self._clock is not None else 0.0  # the clock starts at 0

    def reset_device_cache(self, *, cpu_tier: bool = False) -> None:
        try:  # bounded by time: an idle step takes microseconds
            reset = self.harness.drain_and_reset(timeout_s=DRAIN_TIMEOUT_S, reset_connector=cpu_tier)
        except RuntimeError as exc:  # still busy when the drain's time ran out
            raise ResetRefused(f"{self.spec.name}: {exc}; the next phase would measure device-local hits") from None
        if not reset:
            raise ResetRefused(
                f"{self.spec.name}: vLLM refused reset_prefix_cache() after draining the "
                f"connector; the next phase would measure device-local hits, run aborted"
            )

    @property
    def harness(self) -> Harness:
        """The engine's harness (its vLLM scheduler and connector) until `close()`."""
        if self._harness is None:
            raise RuntimeError(f"dry engine {self.spec.name}: used after close()")
        return self._harness

    def close(self) -> None:
        self._harness = None
