"""The shared tier against a real Mooncake store on loopback: two engines (clients, and processes) share blocks
bit-identically; another identity never sees them; a value that is not what its key says is a counted miss."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from shared_rig import BLOCK_BYTES, RawStore, config, identity, needs_store, payload

from toolkit.errors import BadInput
from toolkit.tiers.disk.checksum import default_checksum
from toolkit.tiers.disk.store import Refused
from toolkit.tiers.shared import SharedTier, StoreServer
from toolkit.tiers.shared.frame import FRAME_HEADER_BYTES, FrameSpec, pack_header

pytestmark = needs_store


@pytest.fixture(scope="module")
def server():
    with StoreServer(64 << 20) as running:
        yield running


# Engines connect once per module: a client's close takes ~1 s (the native client's own shutdown).
@pytest.fixture(scope="module")
def first(server):
    with SharedTier.connect(config(server.master)) as tier:
        yield tier


@pytest.fixture(scope="module")
def second(server):
    with SharedTier.connect(config(server.master)) as tier:
        yield tier


@pytest.fixture(scope="module")
def raw(server):
    store = RawStore(server.master)
    yield store
    store.close()


def test_server_runs_on_loopback_in_an_owner_only_folder_and_cleans_up(tmp_path):
    with StoreServer(16 << 20, run_dir=tmp_path / "runs") as srv:
        assert srv.master.startswith("127.0.0.1:") and srv.mounted_bytes() == 16 << 20
        assert srv.folder is not None and stat.S_IMODE(os.stat(srv.folder).st_mode) == 0o700
        assert {stat.S_IMODE(p.stat().st_mode) for p in srv.folder.iterdir()} == {0o600}
    assert list((tmp_path / "runs").iterdir()) == []  # logs and folder removed at stop


def test_a_second_engine_reads_what_the_first_wrote_bit_identical(first, second):
    before = second.stats()
    blocks = {b"blk%d" % n: payload(n) for n in range(6)}
    for key, data in blocks.items():
        assert isinstance(first.submit_write("attn", key, data), int)
    assert all(c.ok for c in first.wait_all())
    for key, data in blocks.items():
        assert second.contains("attn", key)
        dest = bytearray(BLOCK_BYTES)
        second.submit_read("attn", key, dest)
        assert [c.reason for c in second.wait_all()] == ["ok"]
        assert dest == data
    assert not second.contains("attn", b"never-written")
    second.submit_read("attn", b"never-written", bytearray(BLOCK_BYTES))
    assert [c.reason for c in second.wait_all()] == ["miss"]
    s = second.stats()
    assert (s.hits - before.hits, s.misses - before.misses) == (6, 1)
    assert s.bytes_loaded - before.bytes_loaded == 6 * BLOCK_BYTES and s.read_latency.count >= 6
    assert sum(s.read_latency.buckets) == s.read_latency.count  # every served read in the histogram
    assert 0 < s.read_latency.quantile_upper_s(0.5) <= s.read_latency.max_s <= 5.0
    assert first.stats().writes_ok >= 6


def test_asking_contains_many_times_frees_each_ask_and_keeps_others_completions(first):
    """A lookup holds an in-flight slot until drained: `contains` drains its own, so a tool asking in a loop is
    not refused as busy after `in_flight_bound` asks; a write that finished meanwhile still reaches `poll`."""
    first.submit_write("attn", b"asked-often", payload(3))
    # The write is asynchronous: on a loaded host any number of early asks may beat it, so ask until it is seen
    # (bounded by time) and only then count: every later ask must answer yes, none refused as busy.
    deadline_s = time.monotonic() + 30
    while not first.contains("attn", b"asked-often"):
        assert time.monotonic() < deadline_s, "the write never became visible"
        time.sleep(0.01)
    asks = [first.contains("attn", b"asked-often") for _ in range(first.config.in_flight_bound + 3)]
    assert all(asks), asks
    assert [c.ok for c in first.wait_all()] == [True]


def test_another_identity_never_shares_a_block(server, first):
    tp1 = first
    with SharedTier.connect(config(server.master, identity(tp_size=2))) as tp2:
        tp1.submit_write("attn", b"shared-prefix", payload(7))
        assert all(c.ok for c in tp1.wait_all())
        assert not tp2.contains("attn", b"shared-prefix")
        dest = bytearray(BLOCK_BYTES)
        tp2.submit_read("attn", b"shared-prefix", dest)
        assert [c.ok for c in tp2.wait_all()] == [False] and dest == bytearray(BLOCK_BYTES)
        assert tp1.store_key("attn", b"shared-prefix") != tp2.store_key("attn", b"shared-prefix")


def _frame(key: bytes, ident_digest: bytes, data: bytes) -> bytearray:
    frame = bytearray(FRAME_HEADER_BYTES + len(data))
    view = memoryview(frame)
    view[FRAME_HEADER_BYTES:] = data
    pack_header(FrameSpec(key, "attn", ident_digest, len(data)), default_checksum(), view[FRAME_HEADER_BYTES:], view)
    return frame


@pytest.mark.parametrize("damage", ["flipped", "foreign", "other-key", "truncated", "oversized"])
def test_a_value_that_is_not_what_its_key_says_is_a_counted_miss(second, raw, damage):
    key = b"bad-" + damage.encode()
    tier = second
    before = tier.stats()
    mine = identity().digest()
    value = {
        "flipped": _frame(key, mine, payload(1)),
        "foreign": _frame(key, identity(model="another").digest(), payload(1)),
        "other-key": _frame(b"another-key", mine, payload(1)),
        "truncated": _frame(key, mine, payload(1))[: FRAME_HEADER_BYTES + BLOCK_BYTES // 2],
        "oversized": _frame(key, mine, payload(1, 2 * BLOCK_BYTES)),
    }[damage]
    if damage == "flipped":
        value[FRAME_HEADER_BYTES + 1000] ^= 0x40
    assert raw.put(tier.store_key("attn", key), bytes(value)) == 0
    dest = bytearray(BLOCK_BYTES)
    tier.submit_read("attn", key, dest)
    (done,) = tier.wait_all()
    assert not done.ok and done.reason.startswith("corrupt"), done
    assert dest == bytearray(BLOCK_BYTES)  # nothing copied
    s = tier.stats()
    assert (s.hits - before.hits, s.corrupt - before.corrupt) == (0, 1)
    expected = {"flipped": "checksum", "foreign": "identity", "other-key": "key", "truncated": "length",
                "oversized": "oversized"}[damage]  # fmt: skip
    assert s.corrupt_reasons.get(expected, 0) - before.corrupt_reasons.get(expected, 0) == 1


def test_sizes_and_keys_are_checked_before_anything_is_sent(first):
    tier = first
    with pytest.raises(BadInput, match="payload is 100 B"):
        tier.submit_write("attn", b"k", bytearray(100))
    with pytest.raises(BadInput, match="no pool 'mamba'"):
        tier.submit_read("mamba", b"k", bytearray(BLOCK_BYTES))
    with pytest.raises(BadInput, match="dest must be writable"):
        tier.submit_read("attn", b"k", bytes(BLOCK_BYTES))
    with pytest.raises(BadInput, match="key"):
        tier.submit_read("attn", b"x" * 65, bytearray(BLOCK_BYTES))
    assert tier.in_flight == 0


_WRITER = textwrap.dedent("""
    import sys
    from shared_rig import config, payload
    from toolkit.tiers.shared import SharedTier
    with SharedTier.connect(config(sys.argv[1])) as tier:
        for n in range(4):
            tier.submit_write("attn", b"proc%d" % n, payload(100 + n))
        print(sum(c.ok for c in tier.wait_all()))
""")


def test_two_processes_share_blocks_and_they_outlive_the_writer(server, second):
    done = subprocess.run([sys.executable, "-c", _WRITER, server.master], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).parent)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "4", done.stderr[-2000:]
    reader = second  # the writer has exited: its blocks are still there
    for n in range(4):
        dest = bytearray(BLOCK_BYTES)
        reader.submit_read("attn", b"proc%d" % n, dest)
        assert [c.ok for c in reader.wait_all()] == [True]
        assert dest == payload(100 + n)


def test_two_engines_writing_the_same_prefix_at_once_neither_fails(first, second):
    """Two engines that computed the same prefix demote it together: the store keeps one copy, nobody pauses."""
    keys = [b"both%d" % n for n in range(first.config.in_flight_bound * 3 // 4)]  # the writes' share of the bound
    for key in keys:  # interleaved, both in flight at once
        for tier in (first, second):
            assert isinstance(tier.submit_write("attn", key, payload(len(key) + key[-1])), int)
    done = first.wait_all() + second.wait_all()
    assert sorted({c.reason for c in done}) == ["ok"], [c.reason for c in done]
    assert first.stats().pauses == second.stats().pauses == 0
    for key in keys:
        dest = bytearray(BLOCK_BYTES)
        second.submit_read("attn", key, dest)
        assert [c.ok for c in second.wait_all()] == [True] and dest == payload(len(key) + key[-1])


def test_a_lookup_never_blocks_and_answers_per_key(first, second):
    first.submit_write("attn", b"look-a", payload(1))
    first.submit_write("attn", b"look-c", payload(3))
    assert all(c.ok for c in first.wait_all())
    ticket = second.submit_lookup("attn", [b"look-a", b"look-b", b"look-c"])
    assert isinstance(ticket, int)
    deadline = time.monotonic() + 5
    result = second.lookup_result(ticket)  # None until the store thread has the answer
    while result is None and time.monotonic() < deadline:
        time.sleep(0.001)
        result = second.lookup_result(ticket)
    assert result == (True, False, True)
    with pytest.raises(BadInput, match="1-4096 keys"):
        second.submit_lookup("attn", [])


def test_reads_go_before_a_backlog_of_writes_and_writes_leave_room_for_them(server, first):
    """Below a disk every demotion is also written to the store: a read that falls back from the disk must not
    queue behind those writes (one thread here, so the order is the queue's), nor be refused as busy by them."""
    first.submit_write("attn", b"wanted", payload(11))
    assert [c.ok for c in first.wait_all()] == [True]
    with SharedTier.connect(config(server.master, queue_depth=1, max_in_flight=8)) as tier:
        writes = [tier.submit_write("attn", b"backlog-%d" % n, payload(n)) for n in range(8)]
        accepted = [t for t in writes if isinstance(t, int)]
        assert len(accepted) == 6 and writes[6:] == [Refused.BUSY] * 2  # a quarter of the bound left to reads
        dest = bytearray(BLOCK_BYTES)
        read = tier.submit_read("attn", b"wanted", dest)
        assert isinstance(read, int)
        order = [c.ticket for c in tier.wait_all()]
        assert sorted(order) == sorted(accepted + [read]) and dest == payload(11)


def test_the_store_threads_take_urgent_calls_first_and_each_class_in_order():
    """The queue's order, without a store: one thread held in its first call while the rest queue up."""
    from toolkit.tiers.shared.workers import StoreThreads

    threads = StoreThreads(1, 4096, "order-test")
    threads.start()
    started, release, ran = threading.Event(), threading.Event(), []
    threads.submit(0, lambda staging: (started.set(), release.wait(10)))
    assert started.wait(10)  # the thread is inside its first call: what follows queues
    for ticket, urgent in ((1, False), (2, False), (3, True), (4, False), (5, True)):
        threads.submit(ticket, lambda staging, t=ticket: ran.append(t), urgent=urgent)
    release.set()
    done: list[int] = []
    while len(done) < 6:
        done += [d.ticket for d in threads.drain(timeout_s=5.0)]
    assert ran == [3, 5, 1, 2, 4] and done == [0, 3, 5, 1, 2, 4]
    assert threads.close(timeout_s=5.0)
