"""Reads and writes through kernel AIO (toolkit/tiers/disk/aio.py) move the same bytes as the thread pool's
`preadv` / `pwritev`, refuse what does not verify, turn a short read or a refused submission into a failed
completion, and give way to the thread pool when forced (the switch a machine without libaio takes the same way)."""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import replace

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, payload_for

from toolkit.errors import BadInput
from toolkit.tiers.disk import Direct, DiskTier, Durability, IoPath, PoolSpec
from toolkit.tiers.disk.aio_abi import load
from toolkit.tiers.disk.aligned import probe_direct
from toolkit.tiers.disk.layout import HEADER_BYTES
from toolkit.tiers.disk.manifest import pool_file


@pytest.fixture
def folder(tmp_path):
    if load() is None:
        pytest.skip("libaio.so.1 is not installed: only the thread pool runs here")
    if not probe_direct(tmp_path).direct:
        pytest.skip(f"{tmp_path} refuses O_DIRECT: kernel AIO would not overlap")
    return tmp_path / "tier"


def _chunks(tier: DiskTier, keys: list[bytes]) -> list[list[bytes]]:
    """As many keys at once as the tier lets be in flight (4 x queue depth)."""
    step = 4 * tier.config.queue_depth
    return [keys[n : n + step] for n in range(0, len(keys), step)]


def _write(tier: DiskTier, pool: str, keys: list[bytes], size: int, kind: str = "bytes") -> None:
    """`kind` aligned: from page-aligned memory (the kernel reads it in place); bytes: through staging."""
    for chunk in _chunks(tier, keys):
        for key in chunk:
            payload: bytes | mmap.mmap = payload_for(key, size)
            if kind == "aligned":
                payload = mmap.mmap(-1, size)
                payload[:] = payload_for(key, size)
            assert isinstance(tier.submit_write(pool, key, payload), int)
        assert all(c.ok for c in tier.wait_all())


def _read(tier: DiskTier, pool: str, keys: list[bytes], size: int, kind: str) -> list[tuple[bool, str, bytes]]:
    """The keys read as many at a time as the tier accepts: (ok, reason, bytes) per key."""
    out = []
    for chunk in _chunks(tier, keys):
        dests = [mmap.mmap(-1, size) if kind == "aligned" else bytearray(size) for _ in chunk]
        tickets = [tier.submit_read(pool, key, dest) for key, dest in zip(chunk, dests)]
        assert all(isinstance(t, int) for t in tickets)
        done = {c.ticket: c for c in tier.wait_all()}
        out += [(done[t].ok, done[t].reason, bytes(d)) for t, d in zip(tickets, dests)]  # type: ignore[index]
    return out


@pytest.mark.parametrize(("kind", "queue_depth"), [("aligned", 1), ("bytearray", 1), ("aligned", 4), ("bytearray", 4)])
def test_aio_reads_and_writes_the_bytes_the_thread_pool_does(folder, kind, queue_depth):
    """Queue depth 1: the loop verifies and commits; 4: the I/O threads do (aio.py)."""
    old, new = [b"a%d" % n for n in range(10)], [b"n%d" % n for n in range(6)]  # 16 slots: none evicted
    with DiskTier.open(make_config(folder, io_path=IoPath.THREADS, queue_depth=queue_depth)) as tier:
        assert (tier.read_path, tier.write_path) == ("threads", "threads")
        _write(tier, "attn", old, PAYLOAD_BYTES, kind)
        _write(tier, "mamba", [b"m0", b"m1"], 2 * PAYLOAD_BYTES, kind)
        by_threads = _read(tier, "attn", old, PAYLOAD_BYTES, kind)
    with DiskTier.open(make_config(folder, io_path=IoPath.AIO, queue_depth=queue_depth)) as tier:
        assert (tier.read_path, tier.write_path) == ("aio", "aio")
        assert (tier.stats().read_path, tier.stats().write_path) == ("aio", "aio")
        by_aio = _read(tier, "attn", old, PAYLOAD_BYTES, kind)
        mamba = _read(tier, "mamba", [b"m1", b"m0"], 2 * PAYLOAD_BYTES, kind)
        _write(tier, "attn", new, PAYLOAD_BYTES, kind)
        assert tier.stats().pools["attn"].hits == len(old) and tier.stats().pools["attn"].writes_ok == len(new)
    with DiskTier.open(make_config(folder, io_path=IoPath.THREADS)) as tier:  # what AIO wrote, read by preadv
        assert tier.stats().pools["attn"].restored == len(old) + len(new)
        back = _read(tier, "attn", new, PAYLOAD_BYTES, kind)
    assert by_aio == by_threads
    assert [data for _, _, data in by_aio] == [payload_for(k) for k in old]
    assert [(ok, data) for ok, _, data in mamba] == [(True, payload_for(k, 2 * PAYLOAD_BYTES)) for k in (b"m1", b"m0")]
    assert back == [(True, "ok", payload_for(k)) for k in new]


def test_an_odd_payload_goes_through_staging_and_comes_back_exact(folder):
    odd = 12_345  # padded on disk: the read lands in the lane's staging buffer, copied out once verified
    config = replace(make_config(folder, io_path=IoPath.AIO), pools=(PoolSpec("odd", odd, 8 * (odd + 8192)),))
    with DiskTier.open(config) as tier:
        assert (tier.read_path, tier.write_path) == ("aio", "aio")
        _write(tier, "odd", [b"x", b"y", b"z"], odd)  # through staging too, the padding zeroed
        got = _read(tier, "odd", [b"z", b"x", b"y"], odd, "bytearray")
    with DiskTier.open(replace(config, io_path=IoPath.THREADS)) as tier:
        again = _read(tier, "odd", [b"y"], odd, "bytearray")
    assert got == [(True, "ok", payload_for(k, odd)) for k in (b"z", b"x", b"y")]
    assert again == [(True, "ok", payload_for(b"y", odd))]


@pytest.mark.parametrize(("where", "reason"), [(HEADER_BYTES + 1000, "payload checksum"), (40, "header")])
def test_a_corrupted_block_is_refused_and_dropped(folder, where, reason):
    with DiskTier.open(make_config(folder)) as tier:
        _write(tier, "attn", [b"k0", b"k1"], PAYLOAD_BYTES)
    path = pool_file(folder, "attn")
    with open(path, "r+b") as f:  # flip one byte of whichever slot holds k0 (the first written: slot 0 or 1)
        for slot in (0, 1):
            f.seek(slot * (HEADER_BYTES + PAYLOAD_BYTES) + HEADER_BYTES)
            if payload_for(b"k0")[:64] == f.read(64):
                f.seek(slot * (HEADER_BYTES + PAYLOAD_BYTES) + where)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0x40]))
    with DiskTier.open(make_config(folder)) as tier:
        assert tier.read_path == "aio"
        (bad, good) = _read(tier, "attn", [b"k0", b"k1"], PAYLOAD_BYTES, "aligned")
        assert not bad[0] and reason in bad[1], bad[:2]
        assert good == (True, "ok", payload_for(b"k1"))
        assert tier.stats().pools["attn"].corrupt == 1 and not tier.contains("attn", b"k0")


def test_a_short_read_and_a_refused_submission_are_failed_completions(folder):
    with DiskTier.open(make_config(folder)) as tier:
        _write(tier, "attn", [b"k0", b"k1"], PAYLOAD_BYTES)
        path = pool_file(folder, "attn")
        # the file now ends after the second slot's header: that slot's read comes back short (4 KiB)
        os.truncate(path, (HEADER_BYTES + PAYLOAD_BYTES) + HEADER_BYTES)
        got = _read(tier, "attn", [b"k0", b"k1"], PAYLOAD_BYTES, "aligned")
        assert sorted(ok for ok, _, _ in got) == [False, True]
        assert any("short read" in reason for ok, reason, _ in got if not ok), got
        # A descriptor the kernel refuses to read (write-only) in place of the pool's: io_submit says EBADF
        fd = tier._pools[0].ctx.fd  # noqa: SLF001 - the test swaps the file under the tier, not its code
        write_only = os.open(path, os.O_WRONLY)
        os.dup2(write_only, fd)
        os.close(write_only)
        key = b"k0" if tier.contains("attn", b"k0") else b"k1"
        ((ok, reason, _),) = _read(tier, "attn", [key], PAYLOAD_BYTES, "aligned")
        assert not ok and "Bad file descriptor" in reason, reason
        assert tier.stats().pools["attn"].read_errors == 1
        assert tier.in_flight == 0


def test_a_write_the_kernel_refuses_is_a_failed_completion_and_not_stored(folder):
    with DiskTier.open(make_config(folder)) as tier:  # auto: reads through AIO, writes on the I/O threads
        assert (tier.read_path, tier.write_path) == ("aio", "threads")
    with DiskTier.open(make_config(folder, io_path=IoPath.AIO)) as tier:
        assert tier.write_path == "aio"
        read_only = os.open(pool_file(folder, "attn"), os.O_RDONLY)  # in place of the pool's descriptor: EBADF
        os.dup2(read_only, tier._pools[0].ctx.fd)  # noqa: SLF001
        os.close(read_only)
        assert isinstance(tier.submit_write("attn", b"w", payload_for(b"w")), int)
        ((done),) = tier.wait_all()
        assert not done.ok and "Bad file descriptor" in done.reason, done
        assert tier.stats().pools["attn"].writes_failed == 1 and not tier.contains("attn", b"w")


def test_forcing_the_thread_pool_by_the_environment(folder, monkeypatch):
    monkeypatch.setenv("KVTK_DISK_IO_PATH", "threads")
    with DiskTier.open(make_config(folder)) as tier:
        assert tier.read_path == "threads"
        _write(tier, "attn", [b"t0"], PAYLOAD_BYTES)
        assert _read(tier, "attn", [b"t0"], PAYLOAD_BYTES, "aligned") == [(True, "ok", payload_for(b"t0"))]
    # a configured path wins over the environment; with fdatasync the writes stay on the I/O threads
    with DiskTier.open(make_config(folder, io_path=IoPath.AIO, durability=Durability.FDATASYNC)) as tier:
        assert (tier.read_path, tier.write_path) == ("aio", "threads")
        _write(tier, "attn", [b"t1"], PAYLOAD_BYTES)
        assert _read(tier, "attn", [b"t1", b"t0"], PAYLOAD_BYTES, "aligned") == [
            (True, "ok", payload_for(k)) for k in (b"t1", b"t0")
        ]
    monkeypatch.setenv("KVTK_DISK_IO_PATH", "uring")
    with pytest.raises(BadInput, match="KVTK_DISK_IO_PATH.*'uring'"):
        DiskTier.open(make_config(folder))


def test_buffered_files_fall_back_to_the_thread_pool_and_forced_aio_is_refused(folder, caplog):
    from toolkit.tiers.disk import aio

    before = aio.FALLBACKS[0]
    with caplog.at_level(logging.WARNING, logger="toolkit.tiers.disk"):
        with DiskTier.open(make_config(folder, direct=Direct.OFF)) as tier:
            assert tier.read_path == "threads"
            _write(tier, "attn", [b"b0"], PAYLOAD_BYTES)
            assert _read(tier, "attn", [b"b0"], PAYLOAD_BYTES, "bytearray") == [(True, "ok", payload_for(b"b0"))]
    assert aio.FALLBACKS[0] == before + 1  # counted every time, logged once per process
    assert before or any("thread pool" in r.getMessage() for r in caplog.records)
    with pytest.raises(BadInput, match="io_path: 'aio'.*not O_DIRECT"):
        DiskTier.open(make_config(folder, direct=Direct.OFF, io_path=IoPath.AIO))
