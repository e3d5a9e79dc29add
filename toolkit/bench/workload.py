"""Synthetic hybrid workloads that drive `OffloadManager` (core only), reusable by benchmarks and notebooks.

Requests draw prompts of several lengths, each starting with one of a few shared prefixes, and run through
`toolkit.core.sim.SimEngine` against `DeviceBlockPoolModel`. Only time spent inside the manager is measured.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass

from toolkit.core import (
    BlockKey,
    DeviceBlockPoolModel,
    HybridGeometry,
    OffloadConfig,
    OffloadManager,
    SimpleRequest,
    parse_groups_spec,
)
from toolkit.core.observer import CallTimer
from toolkit.core.sim import SimEngine, chain_hashes


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """Sizes of one synthetic run (defaults: a hybrid FA + Mamba-align model, 256 concurrent requests)."""

    groups: str = "full_attention:16,mamba_align:64"
    dcp: int = 1
    num_requests: int = 256
    prompt_tokens: tuple[int, ...] = (8192, 16384, 32768)
    num_shared_prefixes: int = 8
    shared_prefix_tokens: int = 4096
    chunk_tokens: int = 4096
    decode_tokens: int = 2
    seed: int = 0

    def geometry(self) -> HybridGeometry:
        return HybridGeometry(groups=parse_groups_spec(self.groups), dcp=self.dcp)

    def prompts(self) -> list[tuple[str, list[int]]]:
        rng = random.Random(self.seed)
        out = []
        for index in range(self.num_requests):
            length = self.prompt_tokens[index % len(self.prompt_tokens)]
            prefix = rng.randrange(self.num_shared_prefixes)
            tokens = [prefix * 10_000_000 + i for i in range(min(self.shared_prefix_tokens, length))]
            tokens += [(index + 1) * 100_000_000 + i for i in range(length - len(tokens))]
            out.append((f"req{index}", tokens))
        return out


def run_steps(spec: WorkloadSpec, *, num_cpu_blocks: int, eviction_policy: str = "lru") -> dict:
    """Run every request of `spec` to completion; return manager time per engine step and per lookup."""
    geometry = spec.geometry()
    max_blocks = sum(-(-max(spec.prompt_tokens) // b) + 2 for b in geometry.group_block_tokens)
    device = DeviceBlockPoolModel(spec.num_requests * max_blocks + 16)
    manager = OffloadManager(
        geometry=geometry,
        device_pool=device,
        config=OffloadConfig(
            num_cpu_blocks=num_cpu_blocks,
            eviction_policy=eviction_policy,
            max_num_batched_tokens=spec.chunk_tokens * spec.num_requests,
        ),
    )
    step_timer, lookup_timer = CallTimer(), CallTimer()
    step_timer.wrap(manager, ("build_step", "complete_stores", "complete_loads", "prepare_load", "request_finished"))
    lookup_timer.wrap(manager, ("lookup",))
    engine = SimEngine(manager, device, chunk_tokens=spec.chunk_tokens, max_running=spec.num_requests)
    wall = time.perf_counter()
    # Wave 1 fills the tier; wave 2 replays the shared prefixes with new suffixes and hits them.
    for wave in (0, 1):
        for request_id, tokens in WorkloadSpec(**{**spec.__dict__, "seed": spec.seed + wave}).prompts():
            suffix_shift = wave * 7_000_000_000
            tokens = tokens[: spec.shared_prefix_tokens] + [
                t + suffix_shift for t in tokens[spec.shared_prefix_tokens :]
            ]
            engine.add_request(f"w{wave}-{request_id}", tokens, num_decode_tokens=spec.decode_tokens)
        with _gc_paused():
            engine.run_until_idle()
    wall = time.perf_counter() - wall
    num_stored = sum(1 for e in manager.take_step_events() if e["type"] == "store_complete")
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
    manager = OffloadManager(
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
        raise ValueError(
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
    manager = OffloadManager(
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
