"""Bytes go to disk and come back identical: O_DIRECT and buffered, aligned and unaligned buffers, every pool."""

from __future__ import annotations

import logging
import mmap
import os
import stat

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, payload_for

from toolkit.errors import BadInput
from toolkit.tiers.disk import Direct, DiskTier, Refused
from toolkit.tiers.disk.aligned import probe_direct


def _store_and_load(tier: DiskTier, pool: str, keys: list[bytes], size: int, dest_factory) -> None:
    for key in keys:
        assert isinstance(tier.submit_write(pool, key, payload_for(key, size)), int)
    done = tier.wait_all()
    assert [c.ok for c in done] == [True] * len(keys)
    for key in keys:
        dest = dest_factory(size)
        ticket = tier.submit_read(pool, key, dest)
        assert isinstance(ticket, int)
        (completion,) = tier.wait_all()
        assert completion.ok and completion.key == key, completion
        assert bytes(dest) == payload_for(key, size)


@pytest.mark.parametrize("direct", [Direct.ON, Direct.OFF])
@pytest.mark.parametrize("dest", ["aligned", "bytearray"])
def test_round_trip_is_bytes_identical(tmp_path, direct, dest):
    if direct is Direct.ON and not probe_direct(tmp_path).direct:
        pytest.skip(f"{tmp_path} refuses O_DIRECT")
    factory = (lambda n: mmap.mmap(-1, n)) if dest == "aligned" else bytearray
    with DiskTier.open(make_config(tmp_path / "tier", direct=direct)) as tier:
        assert tier.direct is (direct is Direct.ON)
        _store_and_load(tier, "attn", [b"a%d" % n for n in range(6)], PAYLOAD_BYTES, factory)
        _store_and_load(tier, "mamba", [b"m%d" % n for n in range(3)], 2 * PAYLOAD_BYTES, factory)
        stats = tier.stats()
        assert stats.pools["attn"].hits == 6 and stats.pools["mamba"].hits == 3
        assert stats.write_amplification == pytest.approx(1.0)


def test_payload_not_a_multiple_of_the_alignment(tmp_path):
    """A payload of an odd size is padded on disk and comes back exact (through the staging buffer)."""
    config = make_config(tmp_path / "tier")
    odd = 12_345
    from dataclasses import replace

    from toolkit.tiers.disk import PoolSpec

    config = replace(config, pools=(PoolSpec("odd", odd, 8 * (odd + 8192)),))
    with DiskTier.open(config) as tier:
        _store_and_load(tier, "odd", [b"x", b"y"], odd, bytearray)


def test_files_are_owner_only(tmp_path):
    with DiskTier.open(make_config(tmp_path / "tier")) as tier:
        tier.submit_write("attn", b"k", payload_for(b"k"))
        tier.wait_all()
    folder = tmp_path / "tier"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_ramfs_refuses_o_direct_and_auto_falls_back(ramfs, caplog):
    support = probe_direct(ramfs)
    assert not support.direct and "O_DIRECT refused" in support.reason
    with caplog.at_level(logging.WARNING, logger="toolkit.tiers.disk"):
        with DiskTier.open(make_config(ramfs / "tier")) as tier:
            assert tier.direct is False
            _store_and_load(tier, "attn", [b"r1", b"r2"], PAYLOAD_BYTES, bytearray)
    assert any("buffered I/O" in r.getMessage() for r in caplog.records)


def test_ramfs_with_direct_on_is_refused_in_one_line(ramfs):
    with pytest.raises(BadInput, match="direct: 'on'.*O_DIRECT refused"):
        DiskTier.open(make_config(ramfs / "tier", direct=Direct.ON))


def test_read_of_an_unknown_key_is_a_counted_miss(tmp_path):
    with DiskTier.open(make_config(tmp_path / "tier")) as tier:
        assert tier.submit_read("attn", b"never", bytearray(PAYLOAD_BYTES)) is Refused.MISS
        assert tier.stats().pools["attn"].misses == 1


def test_writing_a_stored_key_again_is_refused_as_present(tmp_path):
    with DiskTier.open(make_config(tmp_path / "tier")) as tier:
        assert isinstance(tier.submit_write("attn", b"k", payload_for(b"k")), int)
        assert tier.submit_write("attn", b"k", payload_for(b"k")) is Refused.PRESENT  # in flight
        tier.wait_all()
        assert tier.submit_write("attn", b"k", payload_for(b"k")) is Refused.PRESENT  # stored


def test_fdatasync_durability_round_trips_and_restores(tmp_path):
    from toolkit.tiers.disk import Durability

    config = make_config(tmp_path / "tier", durability=Durability.FDATASYNC)
    with DiskTier.open(config) as tier:
        _store_and_load(tier, "attn", [b"d1", b"d2"], PAYLOAD_BYTES, bytearray)
    with DiskTier.open(config) as tier:
        assert tier.stats().pools["attn"].restored == 2
        _load = bytearray(PAYLOAD_BYTES)
        tier.submit_read("attn", b"d2", _load)
        assert tier.wait_all()[0].ok and bytes(_load) == payload_for(b"d2")
