"""A process killed (SIGKILL) while it writes: the store reopens, and every block it serves is the block that was
written under that key; some may be lost, none is served torn or stale. Then on-disk damage a crash or a bad disk
leaves (a half-overwritten payload, a flipped header byte, a slot reused for another key whose commit record was
lost, a torn log tail) is a counted miss, never wrong bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, payload_for

from toolkit.tiers.disk import Direct, DiskTier, Refused
from toolkit.tiers.disk.aio_abi import load
from toolkit.tiers.disk.aligned import aligned_buffer, is_aligned, probe_direct
from toolkit.tiers.disk.layout import HEADER_BYTES

TESTS = Path(__file__).parent
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from disk_rig import make_config, payload_for
    from toolkit.tiers.disk import Direct, DiskTier, Refused
    tier = DiskTier.open(make_config(Path(sys.argv[1]), slots=24, direct=Direct(sys.argv[3])))
    n = committed = 0
    while True:  # write new keys for ever (past capacity: slots are evicted and overwritten), until killed
        got = tier.submit_write("attn", b"key-%d" % n, payload_for(b"key-%d" % n))
        if got is not Refused.BUSY:
            n += 1
        for done in tier.poll(0.001 if got is Refused.BUSY else 0.0):
            committed += done.ok
        print(committed, flush=True)
    """
)


def _dest(kind: str) -> bytearray | memoryview:
    """A read destination: a bytearray goes through the I/O thread's staging buffer and is verified there; an
    aligned buffer (as host-mirror rows are) is read into directly and verified by a verifier thread."""
    if kind == "aligned":
        view = memoryview(aligned_buffer(PAYLOAD_BYTES))
        assert is_aligned(view)
        return view
    return bytearray(PAYLOAD_BYTES)


def _read_all(tier: DiskTier, count: int, dest_kind: str = "bytearray", first: int = 0) -> tuple[int, int]:
    """(served and identical, refused or failed) over keys first..count-1; a served block with other bytes fails."""
    served = missed = 0
    for n in range(first, count):
        key = b"key-%d" % n
        dest = _dest(dest_kind)
        if tier.submit_read("attn", key, dest) is Refused.MISS:
            missed += 1
            continue
        (done,) = tier.wait_all()
        if done.ok:
            assert bytes(dest) == payload_for(key), f"{key!r} served with other bytes"
            served += 1
        else:
            missed += 1
    return served, missed


# buffered writes can be cut short by SIGKILL; "aio": the writes through kernel AIO (aio.py), records after them
@pytest.mark.parametrize(("direct", "io_path"), [(Direct.AUTO, "auto"), (Direct.OFF, "auto"), (Direct.AUTO, "aio")])
def test_sigkill_mid_write_serves_no_torn_block(tmp_path, direct, io_path):
    if io_path == "aio" and (load() is None or not probe_direct(tmp_path).direct):
        pytest.skip("no kernel AIO here (libaio absent or O_DIRECT refused)")
    folder = tmp_path / "tier"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder), str(TESTS), direct.value], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS.parents[1]), "KVTK_DISK_IO_PATH": io_path},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    committed = 0
    try:
        while committed < 60 and time.monotonic() < deadline:  # 60 > 24 slots: evictions and overwrites happened
            line = child.stdout.readline()
            if not line:
                break
            committed = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert committed >= 60, f"the child committed only {committed} writes"
    with DiskTier.open(make_config(folder, slots=24, direct=direct)) as tier:
        restored = tier.stats().pools["attn"].restored
        served, _ = _read_all(tier, committed + 200)
    assert 0 < restored <= 24
    assert served >= restored - tier.config.queue_depth * 4  # only slots overwritten at the kill may fail


def _one_block(tmp_path) -> tuple[Path, int]:
    """A store holding key-0 in slot 0 and key-1 in slot 1 (closed); returns its folder and the slot size."""
    config = make_config(tmp_path / "tier")
    with DiskTier.open(config) as tier:
        for n in range(2):
            tier.submit_write("attn", b"key-%d" % n, payload_for(b"key-%d" % n))
        tier.wait_all()
    return tmp_path / "tier", HEADER_BYTES + PAYLOAD_BYTES


def _patch(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def _reopen_and_read_key0(folder: Path, dest_kind: str = "bytearray") -> tuple[int, int, int]:
    with DiskTier.open(make_config(folder)) as tier:
        served, missed = _read_all(tier, 1, dest_kind)
        assert _read_all(tier, 2, dest_kind, first=1) == (1, 0)  # the intact neighbour is served on this path
        corrupt = tier.stats().pools["attn"].corrupt
    return served, missed, corrupt


@pytest.mark.parametrize("dest_kind", ["bytearray", "aligned"])
def test_a_half_overwritten_payload_is_a_counted_miss(tmp_path, dest_kind):
    folder, _ = _one_block(tmp_path)
    # a torn write: the header is key-0's, the second half of the payload is from another write
    _patch(folder / "pool-attn.data", HEADER_BYTES + PAYLOAD_BYTES // 2, payload_for(b"other")[: PAYLOAD_BYTES // 2])
    assert _reopen_and_read_key0(folder, dest_kind) == (0, 1, 1)
    # the slot was dropped in the log as well: the next open does not even try it
    with DiskTier.open(make_config(folder)) as tier:
        assert not tier.contains("attn", b"key-0") and tier.contains("attn", b"key-1")


@pytest.mark.parametrize("dest_kind", ["bytearray", "aligned"])
def test_one_flipped_payload_byte_is_a_counted_miss(tmp_path, dest_kind):
    folder, _ = _one_block(tmp_path)
    path = folder / "pool-attn.data"
    offset = HEADER_BYTES + 777
    with open(path, "rb") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
    _patch(path, offset, bytes([byte ^ 0x01]))
    assert _reopen_and_read_key0(folder, dest_kind) == (0, 1, 1)


@pytest.mark.parametrize("dest_kind", ["bytearray", "aligned"])
def test_one_flipped_header_byte_is_a_counted_miss(tmp_path, dest_kind):
    folder, _ = _one_block(tmp_path)
    _patch(folder / "pool-attn.data", 40, b"\xff")
    assert _reopen_and_read_key0(folder, dest_kind) == (0, 1, 1)


@pytest.mark.parametrize("dest_kind", ["bytearray", "aligned"])
def test_a_slot_reused_for_another_key_is_not_served_under_the_old_one(tmp_path, dest_kind):
    """The log says slot 0 holds key-0, but slot 0 was overwritten with key-1's block (its record lost)."""
    folder, slot_bytes = _one_block(tmp_path)
    path = folder / "pool-attn.data"
    with open(path, "rb") as handle:
        handle.seek(slot_bytes)
        slot1 = handle.read(slot_bytes)
    _patch(path, 0, slot1)
    assert _reopen_and_read_key0(folder, dest_kind) == (0, 1, 1)


def test_a_torn_log_tail_is_skipped(tmp_path):
    config = make_config(tmp_path / "tier")
    tier = DiskTier.open(config)
    for n in range(3):
        tier.submit_write("attn", b"key-%d" % n, payload_for(b"key-%d" % n))
    tier.wait_all()
    tier.close()  # a clean close snapshots the index; put the torn log back as after a crash
    with open(tmp_path / "tier" / "commit.log", "ab") as handle:
        handle.write(b"\x01" * 50)
    with DiskTier.open(config) as again:
        assert again.stats().log_records_invalid == 1
        assert _read_all(again, 3) == (3, 0)


def test_the_log_stops_at_its_cap_and_a_clean_close_still_keeps_everything(tmp_path):
    from toolkit.tiers.disk.commit_log import CommitLog, Op, Record, read_records

    log = CommitLog(tmp_path / "commit.log", sync=False, cap_records=2)
    for n in range(3):
        log.append([Record(Op.COMMIT, 0, n, n + 1, 0, b"k%d" % n)])
    assert (log.records, log.skipped) == (2, 1)
    log.truncate()  # a snapshot was written: the log starts again
    log.append([Record(Op.COMMIT, 0, 9, 9, 0, b"k9")])
    log.close()
    records, bad = read_records(tmp_path / "commit.log", 100)
    assert [r.key for r in records] == [b"k9"] and bad == 0

    config = make_config(tmp_path / "tier")
    tier = DiskTier.open(config)
    tier._log.cap_records = 1  # a store at its cap: commits go unlogged ...
    for n in range(3):
        tier.submit_write("attn", b"key-%d" % n, payload_for(b"key-%d" % n))
    tier.wait_all()
    assert tier.stats().log_records_skipped == 2
    tier.close()  # ... and the clean close's snapshot keeps them all
    with DiskTier.open(config) as again:
        assert _read_all(again, 3) == (3, 0)
