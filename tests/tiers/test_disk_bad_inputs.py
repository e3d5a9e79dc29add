"""Absurd or malformed requests are refused with one line naming the field, and nothing is created."""

from __future__ import annotations

import dataclasses
import os

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, make_identity, payload_for

from toolkit.errors import BadInput
from toolkit.tiers.disk import DiskTier, PoolSpec
from toolkit.tiers.disk.identity import CacheIdentity

TIB = 1 << 40


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"queue_depth": 0}, "queue_depth"),
        ({"queue_depth": 100_000}, "queue_depth"),
        ({"pools": ()}, "pools: 1-64"),
        ({"pools": (PoolSpec("a", 4096, 1 << 20), PoolSpec("a", 4096, 1 << 20))}, "names must differ"),
        ({"pools": (PoolSpec("../x", 4096, 1 << 20),)}, "pool name"),
        ({"pools": (PoolSpec("a", 0, 1 << 20),)}, "payload_bytes"),
        ({"pools": (PoolSpec("a", 4096, 100),)}, "holds no slot"),
        ({"pools": (PoolSpec("a", 4096, 1 << 62),)}, "capacity_bytes"),
        ({"pools": (PoolSpec("a", 4096, 512 * TIB),)}, "slots, more than the limit"),
        ({"pools": (PoolSpec("a", 64 << 20, 512 * TIB),)}, "GiB free in"),  # a plausible size, no such disk
    ],
)
def test_refused_in_one_line_before_anything_is_created(tmp_path, change, message):
    config = dataclasses.replace(make_config(tmp_path / "tier"), **change)
    with pytest.raises(BadInput, match=message) as info:
        DiskTier.open(config)
    assert "\n" not in str(info.value)
    assert not os.path.exists(tmp_path / "tier") or not any(
        p.name.startswith(("pool-", "manifest")) for p in (tmp_path / "tier").iterdir()
    )


def test_a_refused_open_leaves_an_existing_store_intact(tmp_path):
    config = make_config(tmp_path / "tier")
    with DiskTier.open(config) as tier:
        tier.submit_write("attn", b"k", payload_for(b"k"))
        tier.wait_all()
    huge = dataclasses.replace(config, pools=(PoolSpec("attn", 64 << 20, 512 * TIB),))
    with pytest.raises(BadInput, match="GiB free"):
        DiskTier.open(huge)
    with DiskTier.open(config) as tier:
        assert tier.contains("attn", b"k")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.submit_write("attn", b"k", bytes(PAYLOAD_BYTES - 1)), "payload is"),
        (lambda t: t.submit_write("attn", b"", bytes(PAYLOAD_BYTES)), "key: must be 1-64 bytes"),
        (lambda t: t.submit_write("attn", b"x" * 65, bytes(PAYLOAD_BYTES)), "key: must be 1-64 bytes"),
        (lambda t: t.submit_write("nope", b"k", bytes(PAYLOAD_BYTES)), "no pool 'nope'"),
        (lambda t: t.submit_read("attn", b"k", bytes(PAYLOAD_BYTES)), "dest must be writable"),
    ],
)
def test_bad_calls(tmp_path, call, message):
    with DiskTier.open(make_config(tmp_path / "tier")) as tier:
        with pytest.raises(BadInput, match=message):
            call(tier)


def test_folder_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(BadInput, match="symbolic link"):
        DiskTier.open(make_config(tmp_path / "link"))


@pytest.mark.parametrize(
    "change", [{"model": ""}, {"groups": ()}, {"tp_rank": 4}, {"dcp_rank": -1}, {"model": "x" * 1000}]
)
def test_bad_identities(change):
    with pytest.raises(BadInput, match="cache identity"):
        make_identity(**change)


@pytest.mark.parametrize(
    "data",
    [None, [], {"model": "m"}, {**make_identity().to_json(), "tp_size": "4"}, {**make_identity().to_json(), "x": 1}],
)
def test_malformed_identity_json(data):
    with pytest.raises(BadInput, match="cache identity"):
        CacheIdentity.from_json(data)
