"""`Harness`: one real vLLM scheduler with a connector and no model runner; drive it with `add`, `step`,
`run_until_idle`.

Outputs are fabricated the way vLLM's own scheduler unit tests do it (`outputs.py`). The worker side is either ``"copy"`` (the
connector's real worker role over a fake KV allocation laid out as the `KVCacheConfig` says, so loads and stores
really move bytes) or ``"instant"`` (no worker; every transfer completes at the end of its step: cheap enough for
traces of 10^4-10^5 requests, the dry engine uses it). See `workers.py`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from toolkit.core.observer import CallTimer
from toolkit.engines.harness.outputs import default_sample, default_samples
from toolkit.engines.harness.outputs import runner_output as fabricated_output
from toolkit.engines.harness.shapes import SHAPES, build_harness_config
from toolkit.engines.harness.stall import StallWatch
from toolkit.engines.harness.timed import timed_transfer_config, watch_connector
from toolkit.engines.harness.workers import drive_worker, instant_output, loaded_pairs_of
from toolkit.engines.store_count import StoreCounter
from toolkit.errors import BadInput
from toolkit.vllm.adapters import prefill_hit_tokens
from toolkit.vllm.config import CONNECTORS
from toolkit.vllm.transfer_config import kv_transfer_config

if TYPE_CHECKING:
    from toolkit.engines.layout import Layout

# A request's block hasher, as vLLM's scheduler calls it (vLLM's `Request` in, the new block hashes out).
BlockHasher = Callable[[Any], list[bytes]]


@dataclass
class StepRecord:
    step: int
    num_scheduled_tokens: int
    connector_seconds: float  # scheduler-side connector hooks only (wall time inside the hooks, see `timed.py`)
    scheduler_seconds: float  # schedule() + update_from_output() in all


@dataclass
class RequestRecord:
    req_id: str
    prompt_tokens: int
    local_hit_tokens: int = 0
    external_hit_tokens: int = 0
    loaded_pairs: list[tuple[int, int]] = field(default_factory=list)  # (group, device block) filled by loads
    stored_blocks: int = 0  # (group, device block) pairs stored by vLLM's SimpleCPU (`store_count.py`)
    output_tokens: list[int] = field(default_factory=list)
    finished: bool = False
    readmission_external_tokens: list[int] = field(default_factory=list)


class Harness:
    """One real vLLM scheduler with a connector; drive it with `add`, `step`, `run_until_idle`.

    `shape` is a name in `SHAPES` or any `layout.Layout` (a preset's `geometry_layout.ModelLayout`).
    `retention_interval_tokens`: vLLM's `prefix_cache_retention_interval` (`shapes.build_harness_config`; None: the
    engine's default, as the live engine runs).
    """

    def __init__(
        self,
        shape: str | Layout = "tiny-qwen3-next",
        *,
        connector: str = "toolkit",
        extra_config: dict[str, Any] | None = None,
        num_gpu_blocks: int = 64,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 16,
        max_model_len: int = 8192,
        prefix_match_unit: int | None = None,
        worker: str = "instant",
        base_config: Any = None,
        sample_fn: Callable[[str, int], int] | None = None,
        speculative: dict[str, Any] | None = None,
        retention_interval_tokens: int | None = None,
    ) -> None:
        self.shape: Layout = SHAPES[shape] if isinstance(shape, str) else shape
        if connector not in CONNECTORS:
            raise BadInput(f"connector: unknown connector {connector!r}; valid: {', '.join(CONNECTORS)}")
        if worker not in ("instant", "copy"):
            raise BadInput(f"worker: {worker!r} is not 'instant' or 'copy'")
        self.connector_name = connector
        self.worker_mode = worker
        self.vllm_config = build_harness_config(
            self.shape,
            base_config,
            timed_transfer_config(kv_transfer_config(connector, extra_config)),
            num_gpu_blocks=num_gpu_blocks,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            prefix_match_unit=prefix_match_unit,
            speculative=speculative,
            retention_interval_tokens=retention_interval_tokens,
        )
        self.num_ranks = self.vllm_config.parallel_config.world_size  # ranks whose store completions each step sums
        self._resolve_block_sizes(num_gpu_blocks)
        self.connector_timer = CallTimer()  # wall time inside the connector's scheduler hooks (`timed.py`)
        # Called with each step's `SchedulerOutput` right after `schedule()` (the dry engine's step clock and hit
        # reads): the harness drives vLLM's scheduler itself, so nothing needs to patch its methods.
        self.step_listeners: list[Callable[[Any], None]] = []
        self._last_local: dict[str, int] = {}
        self._admitted: set[str] = set()
        self._start_scheduler()
        self.worker: Any = None  # the connector's worker role ("copy" worker only) and the KV it copies to and from
        self.device_kv: Any = None
        if worker == "copy" and self.connector is not None:
            self.worker, self.device_kv = self._start_worker()
        self.requests: dict[str, RequestRecord] = {}
        self.steps: list[StepRecord] = []
        # Per request, the (group, device block) pairs the current step's loads fill (`loaded_pairs_of`).
        self.loaded_pairs_last_step: dict[str, list[tuple[int, int]]] = {}
        self._stores = StoreCounter()
        self.finished_last_step: list[str] = []  # the requests the last `step` finished (their records are set)
        self.sample_token = sample_fn or default_sample
        self._step_index = 0

    # ----- set-up ---------------------------------------------------------------------------------------------

    def _resolve_block_sizes(self, num_gpu_blocks: int) -> None:
        """The KV cache layout, and the scheduler and hash block sizes vLLM derives from it."""
        from vllm.v1.core.kv_cache_utils import resolve_cache_hit_alignment_tokens, resolve_kv_cache_block_sizes

        kv = self.kv_cache_config = self.shape.kv_cache_config(num_gpu_blocks)
        scheduler_block, hash_block = resolve_kv_cache_block_sizes(kv, self.vllm_config)
        kv.hash_block_size = hash_block
        kv.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
            kv, self.vllm_config, scheduler_block, hash_block
        )
        # Which Mamba and sliding-window states the device cache keeps (vLLM's `--prefix-cache-retention-interval`;
        # the engine copies it from the cache config into the KV cache config). Left at the KV cache config's own
        # default (dense) the scheduler kept every boundary state where the engine keeps only the replay boundaries
        # and shared-prefix junctions (the cache config's default, 0): the dry engine then found on the device a
        # state the live engine had to load from the CPU tier.
        kv.prefix_cache_retention_interval = self.vllm_config.cache_config.prefix_cache_retention_interval
        self.scheduler_block_tokens = scheduler_block
        self.hash_block_tokens = hash_block

    def _start_scheduler(self) -> None:
        """vLLM's scheduler (its connector the timed subclass, `timed.py`) and the request block hasher it expects."""
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        vllm_config = self.vllm_config
        self.scheduler = Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=copy.deepcopy(self.kv_cache_config),
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=self.scheduler_block_tokens,
            hash_block_size=self.hash_block_tokens,
            log_stats=True,
        )
        self.connector = self.scheduler.connector
        if self.connector is not None:
            watch_connector(
                self.connector,
                timer=self.connector_timer,
                on_matched=self._last_local.__setitem__,
                on_admitted=self._on_admitted,
            )
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self._block_hasher = get_request_block_hasher(self.hash_block_tokens, hash_fn)

    def replace_block_hasher(self, make: Callable[[int, BlockHasher], BlockHasher]) -> None:
        """Hash the blocks of requests added from now on with `make(hash_block_tokens, vLLM's hasher)`."""
        self._block_hasher = make(self.hash_block_tokens, self._block_hasher)

    def _start_worker(self) -> tuple[Any, Any]:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        from toolkit.vllm.regions import allocate_fake_kv

        worker = KVConnectorFactory.create_connector(
            config=self.vllm_config, role=KVConnectorRole.WORKER, kv_cache_config=self.kv_cache_config
        )
        caches = allocate_fake_kv(self.kv_cache_config)
        worker.register_kv_caches(caches)
        return worker, caches

    # ----- driving --------------------------------------------------------------------------------------------

    def add(
        self,
        req_id: str,
        prompt_token_ids: Sequence[int],
        max_tokens: int = 1,
        *,
        owned: bool = False,
        kv_hints: Any = None,
    ) -> None:
        """`owned=True`: the caller hands over `prompt_token_ids` (a list nobody else changes), saving a copy.
        `kv_hints`: vLLM's `KvHintsEnvelope` for `Request.kv_hints`, as `LLMEngine.add_request` sets it."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        request = Request(
            request_id=req_id,
            prompt_token_ids=prompt_token_ids if owned else list(prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            block_hasher=self._block_hasher,
            kv_hints=kv_hints,
        )
        self.requests[req_id] = RequestRecord(req_id=req_id, prompt_tokens=len(prompt_token_ids))
        self.scheduler.add_request(request)

    def sample_tokens(self, req_id: str, first: int, count: int) -> list[int]:
        """`sample_token(req_id, i)` for the `count` indices from `first` (a decode stretch's tokens at once)."""
        if self.sample_token is default_sample:
            return default_samples(req_id, first, count)
        return [self.sample_token(req_id, i) for i in range(first, first + count)]

    def abort(self, req_ids: Iterable[str]) -> None:
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(list(req_ids), RequestStatus.FINISHED_ABORTED)

    @property
    def busy(self) -> bool:
        pending = self.connector is not None and self.connector.has_pending_push_work()
        return bool(self.scheduler.has_requests() or pending)

    def step(self) -> StepRecord:
        timer = self.connector_timer
        timer.seconds = 0.0
        start = time.perf_counter()
        output = self.scheduler.schedule()
        scheduling = time.perf_counter() - start
        self._observe_loads(output)  # before the listeners: they may read `loaded_pairs_last_step`
        for listener in self.step_listeners:
            listener(output)
        kv_output = self._run_worker(output)
        runner_output = fabricated_output(self.scheduler, output, kv_output, self.sample_token)
        start = time.perf_counter()
        engine_outputs = self.scheduler.update_from_output(output, runner_output)
        scheduling += time.perf_counter() - start
        finished = self.finished_last_step = []
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                record = self.requests.get(out.request_id)
                if record is not None:
                    record.output_tokens.extend(out.new_token_ids)
                    if out.finish_reason is not None:
                        record.finished = True
                        finished.append(out.request_id)
        step = StepRecord(self._step_index, output.total_num_scheduled_tokens, timer.seconds, scheduling)
        self.steps.append(step)
        self._step_index += 1
        return step

    def run_until_idle(self, max_steps: int = 100_000, timeout_s: float = 60.0, stall_steps: int | None = None) -> int:
        """Step until no request and no connector work is left. Bounded by time: with the "copy" worker, copies run
        on threads and a step with nothing scheduled takes microseconds, so a step count says nothing about how
        long a copy had to finish (`max_steps` only stops a scheduling loop that never ends). With the "instant"
        worker every copy ends with its step, so `stall_steps` consecutive steps that schedule nothing while
        requests wait can only be a stalled scheduler: `HarnessStalled` is raised at once."""
        steps = working = 0
        deadline = time.monotonic() + timeout_s
        watch = StallWatch(stall_steps, "harness") if stall_steps is not None else None
        while self.busy:
            if self.worker is not None and not self.scheduler.has_unfinished_requests():
                time.sleep(0.0005)  # only copies left: let their threads run
            num_scheduled = self.step().num_scheduled_tokens
            working += num_scheduled > 0
            steps += 1
            if watch is not None:
                watch.step(num_scheduled, self.scheduler.get_num_unfinished_requests)
            if working >= max_steps or time.monotonic() >= deadline:
                pending = (
                    self.connector.scheduler_side.manager.pending_work() if self.connector_name == "toolkit" else {}
                )
                raise RuntimeError(
                    f"harness: still busy after {steps} steps ({working} scheduled) and "
                    f"{timeout_s} s: {self.scheduler.get_num_unfinished_requests()} unfinished "
                    f"request(s), connector pending {pending}"
                )
        return steps

    def run(self, prompts: dict[str, list[int]], max_tokens: int = 1) -> dict[str, RequestRecord]:
        """Add every prompt, step until idle (pending connector stores included); return their records."""
        for req_id, tokens in prompts.items():
            self.add(req_id, tokens, max_tokens)
        self.run_until_idle()
        return {req_id: self.requests[req_id] for req_id in prompts}

    def reset_prefix_cache(self, *, reset_connector: bool = False) -> bool:
        return bool(self.scheduler.reset_prefix_cache(reset_connector=reset_connector))

    def drain_and_reset(
        self, *, timeout_s: float = 60.0, stall_steps: int | None = None, reset_connector: bool = False
    ) -> bool:
        """Step until idle (the connector's pending stores included, `run_until_idle`), then reset the device
        prefix cache: whether vLLM agreed (it refuses while stores are in flight, a hot phase would then measure
        device-local hits)."""
        self.run_until_idle(timeout_s=timeout_s, stall_steps=stall_steps)
        return self.reset_prefix_cache(reset_connector=reset_connector)

    # ----- observation ---------------------------------------------------------------------------------------

    def _on_admitted(self, req_id: str, num_external_tokens: int) -> None:
        """First allocation of a request (after a preemption its re-admission is counted in `readmissions`)."""
        record = self.requests.get(req_id)
        if record is None or req_id in self._admitted:
            if record is not None and num_external_tokens:
                record.readmission_external_tokens.append(num_external_tokens)
            return
        self._admitted.add(req_id)
        # vLLM's own record of the admission when this build keeps one: the lookup saw the block-aligned local
        # prefix, and vLLM keeps a longer local hit (a partial block) when the connector's hit does not exceed it.
        hits = prefill_hit_tokens(self.scheduler.requests[req_id]) if req_id in self.scheduler.requests else None
        record.local_hit_tokens = hits[0] if hits is not None else self._last_local.get(req_id, 0)
        record.external_hit_tokens = num_external_tokens

    def _observe_loads(self, output: Any) -> None:
        meta = output.kv_connector_metadata
        loaded = self.loaded_pairs_last_step = loaded_pairs_of(meta, self) if meta is not None else {}
        for req_id, pairs in loaded.items():
            if req_id in self.requests:
                self.requests[req_id].loaded_pairs.extend(pairs)
        for req_id, count in self._stores.step(output, self.scheduler).items():  # SimpleCPU's, per request
            if req_id in self.requests:
                self.requests[req_id].stored_blocks += count

    def _run_worker(self, output: Any) -> Any:
        meta = output.kv_connector_metadata
        if meta is None or self.connector is None:
            return None
        if self.worker is not None:
            return drive_worker(self.worker, output)
        return instant_output(meta, output.finished_req_ids, self)

    # ----- reporting ------------------------------------------------------------------------------------------

    def connector_seconds_per_step(self) -> float:
        busy = [s for s in self.steps if s.num_scheduled_tokens or s.connector_seconds]
        return sum(s.connector_seconds for s in busy) / max(1, len(busy))
