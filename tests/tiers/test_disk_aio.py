"""Reads through kernel AIO (toolkit/tiers/disk/aio.py) serve the same bytes as the thread pool's `preadv`, refuse
what does not verify, turn a short read or a refused submission into a failed completion, and give way to the
thread pool when forced (the switch a machine without libaio takes the same way)."""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import replace

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, payload_for

from toolkit.errors import BadInput
from toolkit.tiers.disk import Direct, DiskTier, PoolSpec, ReadPath
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


def _write(tier: DiskTier, pool: str, keys: list[bytes], size: int) -> None:
    for key in keys:
        assert isinstance(tier.submit_write(pool, key, payload_for(key, size)), int)
    assert all(c.ok for c in tier.wait_all())


def _read(tier: DiskTier, pool: str, keys: list[bytes], size: int, kind: str) -> list[tuple[bool, str, bytes]]:
    """Every key read at once (the tier keeps `queue_depth` in flight): (ok, reason, bytes) per key."""
    dests = [mmap.mmap(-1, size) if kind == "aligned" else bytearray(size) for _ in keys]
    tickets = [tier.submit_read(pool, key, dest) for key, dest in zip(keys, dests)]
    assert all(isinstance(t, int) for t in tickets)
    done = {c.ticket: c for c in tier.wait_all()}
    return [(done[t].ok, done[t].reason, bytes(d)) for t, d in zip(tickets, dests)]  # type: ignore[index]


@pytest.mark.parametrize("kind", ["aligned", "bytearray"])
def test_aio_reads_the_bytes_the_thread_pool_reads(folder, kind):
    keys = [b"a%d" % n for n in range(12)]
    with DiskTier.open(make_config(folder, read_path=ReadPath.THREADS)) as tier:
        assert tier.read_path == "threads"
        _write(tier, "attn", keys, PAYLOAD_BYTES)
        _write(tier, "mamba", [b"m0", b"m1"], 2 * PAYLOAD_BYTES)
        by_threads = _read(tier, "attn", keys, PAYLOAD_BYTES, kind)
    with DiskTier.open(make_config(folder, read_path=ReadPath.AIO)) as tier:
        assert tier.read_path == "aio" and tier.stats().read_path == "aio"
        by_aio = _read(tier, "attn", keys, PAYLOAD_BYTES, kind)
        mamba = _read(tier, "mamba", [b"m1", b"m0"], 2 * PAYLOAD_BYTES, kind)
        assert tier.stats().pools["attn"].hits == len(keys)
    assert by_aio == by_threads
    assert [data for _, _, data in by_aio] == [payload_for(k) for k in keys]
    assert [(ok, data) for ok, _, data in mamba] == [(True, payload_for(k, 2 * PAYLOAD_BYTES)) for k in (b"m1", b"m0")]


def test_an_odd_payload_goes_through_staging_and_comes_back_exact(folder):
    odd = 12_345  # padded on disk: the read lands in the lane's staging buffer, copied out once verified
    config = replace(make_config(folder), pools=(PoolSpec("odd", odd, 8 * (odd + 8192)),))
    with DiskTier.open(config) as tier:
        assert tier.read_path == "aio"
        _write(tier, "odd", [b"x", b"y", b"z"], odd)
        got = _read(tier, "odd", [b"z", b"x", b"y"], odd, "bytearray")
    assert got == [(True, "ok", payload_for(k, odd)) for k in (b"z", b"x", b"y")]


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


def test_forcing_the_thread_pool_by_the_environment(folder, monkeypatch):
    monkeypatch.setenv("KVTK_DISK_READ_PATH", "threads")
    with DiskTier.open(make_config(folder)) as tier:
        assert tier.read_path == "threads"
        _write(tier, "attn", [b"t0"], PAYLOAD_BYTES)
        assert _read(tier, "attn", [b"t0"], PAYLOAD_BYTES, "aligned") == [(True, "ok", payload_for(b"t0"))]
    # a configured path wins over the environment
    with DiskTier.open(make_config(folder, read_path=ReadPath.AIO)) as tier:
        assert tier.read_path == "aio"
    monkeypatch.setenv("KVTK_DISK_READ_PATH", "uring")
    with pytest.raises(BadInput, match="KVTK_DISK_READ_PATH.*'uring'"):
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
    with pytest.raises(BadInput, match="read_path: 'aio'.*not O_DIRECT"):
        DiskTier.open(make_config(folder, direct=Direct.OFF, read_path=ReadPath.AIO))
