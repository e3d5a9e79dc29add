"""Drive `OffloadManager` (core only) with the scheduler benchmark's hybrid workload and time it.

The prompts come from `toolkit.workloads.hybrid_prompts` (a few shared prefixes, several lengths) and run through
`toolkit.core.sim.SimEngine` against `DeviceBlockPoolModel`. Only time spent inside the manager is measured.
"""

from __future__ import annotations

import functools
import gc
import time
from typing import Any, Callable

from toolkit.core import BlockKey, DeviceBlockPoolModel, OffloadConfig, OffloadManager, SimpleRequest
from toolkit.core.events import StoreDone
from toolkit.core.sim import SimEngine, chain_hashes
from toolkit.errors import BadInput
from toolkit.workloads.hybrid_prompts import WorkloadSpec, wave_prompts


class _Seconds:
    """Wall seconds and calls of the methods one timer covers."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0


def _timed(method: Callable[..., Any], counter: str) -> Callable[..., Any]:
    """`method` (the manager's own), adding its wall time to the instance's `counter`."""

    @functools.wraps(method)
    def timed(self: TimedManager, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            seconds = getattr(self, counter)
            seconds.seconds += time.perf_counter() - start
            seconds.calls += 1

    return timed


class TimedManager(OffloadManager):
    """The manager with its step-path methods and its lookup timed: a subclass, so no method of an instance or of
    `OffloadManager` is replaced. `step_seconds`: build_step, completions, load planning, departures;
    `lookup_seconds`: lookups."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_seconds, self.lookup_seconds = _Seconds(), _Seconds()

    lookup = _timed(OffloadManager.lookup, "lookup_seconds")
    build_step = _timed(OffloadManager.build_step, "step_seconds")
    prepare_load = _timed(OffloadManager.prepare_load, "step_seconds")
    complete_stores = _timed(OffloadManager.complete_stores, "step_seconds")
    complete_loads = _timed(OffloadManager.complete_loads, "step_seconds")
    request_finished = _timed(OffloadManager.request_finished, "step_seconds")


def run_steps(spec: WorkloadSpec, *, num_cpu_blocks: int, eviction_policy: str = "lru") -> dict:
    """Run every request of `spec` to completion; return manager time per engine step and per lookup."""
    geometry = spec.geometry()
    max_blocks = sum(-(-max(spec.prompt_tokens) // b) + 2 for b in geometry.group_block_tokens)
    device = DeviceBlockPoolModel(spec.num_requests * max_blocks + 16)
    manager = TimedManager(
        geometry=geometry,
        device_pool=device,
        config=OffloadConfig(
            num_cpu_blocks=num_cpu_blocks,
            eviction_policy=eviction_policy,
            max_num_batched_tokens=spec.chunk_tokens * spec.num_requests,
        ),
    )
    step_timer, lookup_timer = manager.step_seconds, manager.lookup_seconds
    engine = SimEngine(manager, device, chunk_tokens=spec.chunk_tokens, max_running=spec.num_requests)
    wall = time.perf_counter()
    # Wave 1 fills the tier; wave 2 replays the shared prefixes with new suffixes and hits them.
    for wave in (0, 1):
        trace = wave_prompts(spec, wave)
        for request in trace.requests:
            engine.add_request(
                request.request_id, trace.prompt_token_ids(request), num_decode_tokens=request.max_tokens
            )
        with _gc_paused():
            engine.run_until_idle()
    wall = time.perf_counter() - wall
    num_stored = sum(1 for e in manager.take_step_events() if isinstance(e, StoreDone))
    return {
        "num_cpu_blocks": num_cpu_blocks,
        "num_steps": engine.num_steps,
        "us_per_step": 1e6 * step_timer.seconds / max(1, engine.num_steps),
        "us_per_lookup": 1e6 * lookup_timer.seconds / max(1, lookup_timer.calls),
        "num_lookups": manager.miss_stats.num_lookups,
        "num_hit_tokens": manager.miss_stats.num_hit_tokens,
        "num_store_events": num_stored,
        "sim_wall_s": wall,
    }


class _gc_paused:
    """Timed sections run with the cyclic GC off (as `timeit` does): a 1M-key pool makes full collections cost
    milliseconds that have nothing to do with the code being measured."""

    def __enter__(self):
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self._was:
            gc.enable()


def fill_pool(manager: OffloadManager, num_blocks: int) -> None:
    """Occupy `num_blocks` CPU blocks with unrelated cached keys (group 0), as a long-running server would."""
    pool = manager.cpu
    batch = 4096
    done = 0
    while done < num_blocks:
        count = min(batch, num_blocks - done)
        blocks = pool.allocate([0] * count)
        for offset, block_id in enumerate(blocks):
            # Same key type as the workload's chained hashes (ints), so filler keys cost what real keys cost.
            pool.cache(block_id, BlockKey(0, hash(("filler", done + offset))))
        pool.free(blocks)
        done += count


def store_resident(manager: OffloadManager, request: SimpleRequest) -> None:
    """Make every block of a prompt resident on the CPU (FA blocks and the Mamba states at each block)."""
    geometry, pool = manager.geometry, manager.cpu
    hashes = request.block_hashes
    for group_id, block in enumerate(geometry.group_block_tokens):
        ends = range(block, len(hashes) * geometry.hash_tokens + 1, block)
        blocks = pool.allocate([group_id] * len(ends))
        for block_id, end in zip(blocks, ends):
            pool.cache(block_id, BlockKey(group_id, hashes[end // geometry.hash_tokens - 1]))
        pool.free(blocks)


def time_lookups(
    spec: WorkloadSpec, *, num_cpu_blocks: int, prompt_tokens: int, repeats: int = 20, fill: bool = True
) -> dict:
    """Microseconds per full-hit lookup of a resident `prompt_tokens` prompt in a pool of `num_cpu_blocks`,
    the rest of the pool filled with other keys (so only pool size differs between runs)."""
    geometry = spec.geometry()
    manager = TimedManager(
        geometry=geometry, device_pool=DeviceBlockPoolModel(2), config=OffloadConfig(num_cpu_blocks=num_cpu_blocks)
    )
    tokens = list(range(prompt_tokens + 1))
    request = SimpleRequest(
        request_id="probe",
        num_tokens=len(tokens),
        num_prompt_tokens=len(tokens),
        block_hashes=chain_hashes(tokens, geometry.hash_tokens),
    )
    resident = sum(prompt_tokens // b for b in geometry.group_block_tokens)
    if resident > manager.cpu.num_usable_blocks:
        raise BadInput(
            f"prompt_tokens: {prompt_tokens} tokens need {resident} blocks; the pool has "
            f"{manager.cpu.num_usable_blocks}"
        )
    if fill:
        fill_pool(manager, manager.cpu.num_usable_blocks - resident)
    store_resident(manager, request)
    hit = manager.lookup(request, 0).hit_tokens
    manager.prepare_load(request, [[] for _ in geometry.groups], 0)
    best = float("inf")
    with _gc_paused():
        for _ in range(15):  # best of 15 rounds: the machine is shared, the minimum is the code's own cost
            start = time.perf_counter()
            for _ in range(repeats):
                manager.lookup(request, 0)
                manager.prepare_load(request, [[] for _ in geometry.groups], 0)
            best = min(best, (time.perf_counter() - start) / repeats)
    elapsed = best * repeats
    return {
        "num_cpu_blocks": num_cpu_blocks,
        "prompt_tokens": prompt_tokens,
        "hit_tokens": hit,
        "prompt_blocks": resident,
        "us_per_lookup": 1e6 * elapsed / repeats,
    }


def time_pool_stores(spec: WorkloadSpec, *, num_cpu_blocks: int, prompt_tokens: int, rounds: int = 15) -> dict:
    """Microseconds per stored block when every store must evict: the CPU pool's store path (allocate with
    eviction, register the block's key, release to the evictable queue) into a pool of `num_cpu_blocks` that is
    already full of other keys. Each round stores a fresh prompt, so only the pool size differs between runs."""
    geometry = spec.geometry()
    manager = TimedManager(
        geometry=geometry, device_pool=DeviceBlockPoolModel(2), config=OffloadConfig(num_cpu_blocks=num_cpu_blocks)
    )
    fill_pool(manager, manager.cpu.num_usable_blocks)
    blocks_per_prompt = sum(prompt_tokens // b for b in geometry.group_block_tokens)
    best = float("inf")
    with _gc_paused():
        for round_index in range(rounds):
            tokens = [round_index * 10_000_000 + t for t in range(prompt_tokens + 1)]
            request = SimpleRequest(
                request_id=f"store-{round_index}",
                num_tokens=len(tokens),
                num_prompt_tokens=len(tokens),
                block_hashes=chain_hashes(tokens, geometry.hash_tokens),
            )
            start = time.perf_counter()
            store_resident(manager, request)
            best = min(best, time.perf_counter() - start)
    return {
        "num_cpu_blocks": num_cpu_blocks,
        "prompt_tokens": prompt_tokens,
        "blocks_per_store": blocks_per_prompt,
        "us_per_stored_block": 1e6 * best / blocks_per_prompt,
    }
