"""A store survives a clean restart and is reused only under the same cache identity; any changed field means no
reuse, one log line naming it, and the old files gone."""

from __future__ import annotations

import dataclasses
import logging
import os

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, make_identity, payload_for

from toolkit.errors import BadInput
from toolkit.tiers.disk import DiskTier, GroupGeometry, Refused
from toolkit.tiers.disk.identity import CacheIdentity

KEYS = [b"block-%d" % n for n in range(5)]


def _fill(config) -> None:
    with DiskTier.open(config) as tier:
        for key in KEYS:
            tier.submit_write("attn", key, payload_for(key))
        assert all(c.ok for c in tier.wait_all())


def _served(tier: DiskTier) -> list[bytes]:
    out = []
    for key in KEYS:
        dest = bytearray(PAYLOAD_BYTES)
        if tier.submit_read("attn", key, dest) is Refused.MISS:
            continue
        (done,) = tier.wait_all()
        if done.ok:
            assert bytes(dest) == payload_for(key)
            out.append(key)
    return out


def test_clean_restart_with_the_same_identity_hits(tmp_path):
    config = make_config(tmp_path / "tier")
    _fill(config)
    with DiskTier.open(config) as tier:
        assert tier.stats().pools["attn"].restored == len(KEYS)
        assert _served(tier) == KEYS
    with DiskTier.open(config) as tier:  # and again: the close wrote a snapshot of the index in LRU order
        assert _served(tier) == KEYS


CHANGES = {
    "model": "Qwen/Qwen3.5-27B",
    "model_config_hash": "deadbeef",
    "dtype": "float16",
    "groups": (GroupGeometry("full_attention", 32, PAYLOAD_BYTES), GroupGeometry("mamba", 16, 2 * PAYLOAD_BYTES)),
    "hash_unit_tokens": 128,
    "hash_algorithm": "xxhash",
    "vllm_version": "0.34.0",
    "tp_size": 8,
    "tp_rank": 2,
    "dcp_size": 2,
    "dcp_rank": 1,
    "format_version": 999,
}
# A rank must stay inside its size: these fields change together with the size they need.
COMPANIONS = {"dcp_rank": {"dcp_size": 2}}


def test_every_identity_field_is_covered():
    assert set(CHANGES) == {f.name for f in dataclasses.fields(CacheIdentity)}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_changed_identity_field_means_no_reuse_and_names_the_field(tmp_path, caplog, field):
    config = make_config(tmp_path / "tier")
    _fill(config)
    old = getattr(config.identity, field)
    changed = dataclasses.replace(
        config, identity=make_identity(**{field: CHANGES[field]}, **COMPANIONS.get(field, {}))
    )
    with caplog.at_level(logging.WARNING, logger="toolkit.tiers.disk"):
        with DiskTier.open(changed) as tier:
            assert _served(tier) == []
            assert tier.stats().pools["attn"].restored == 0
    lines = [r.getMessage() for r in caplog.records if "discarding" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"{field}: " in lines[0] and "->" in lines[0], lines[0]
    if field != "groups":
        assert repr(old)[:40] in lines[0] and repr(CHANGES[field])[:40] in lines[0]
    # the old store is gone: reopening under the old identity finds nothing either
    with DiskTier.open(config) as tier:
        assert _served(tier) == []


def test_a_changed_capacity_discards_with_a_line(tmp_path, caplog):
    _fill(make_config(tmp_path / "tier"))
    with caplog.at_level(logging.WARNING, logger="toolkit.tiers.disk"):
        with DiskTier.open(make_config(tmp_path / "tier", slots=32)) as tier:
            assert _served(tier) == []
    assert any("pools:" in r.getMessage() for r in caplog.records)


def test_an_unreadable_manifest_discards(tmp_path, caplog):
    config = make_config(tmp_path / "tier")
    _fill(config)
    (tmp_path / "tier" / "manifest.json").write_text('{"format_version": 1, "format_version": 2}')
    with caplog.at_level(logging.WARNING, logger="toolkit.tiers.disk"):
        with DiskTier.open(config) as tier:
            assert _served(tier) == []
    assert any("manifest unreadable" in r.getMessage() for r in caplog.records)


def test_a_second_process_cannot_open_the_same_store(tmp_path):
    config = make_config(tmp_path / "tier")
    with DiskTier.open(config):
        with pytest.raises(BadInput, match="in use by another process"):
            DiskTier.open(config)
    DiskTier.open(config).close()  # released at close


def test_the_log_alone_restores_after_a_crash_without_close(tmp_path):
    """No close (no snapshot): the commit log written as each write completed is enough."""
    config = make_config(tmp_path / "tier")
    tier = DiskTier.open(config)
    for key in KEYS:
        tier.submit_write("attn", key, payload_for(key))
    tier.wait_all()
    assert os.path.getsize(tmp_path / "tier" / "commit.log") > 0
    tier._io.close()  # simulate a dead process: release the lock and files without the snapshot
    tier._log.close()
    for p in tier._pools:
        os.close(p.ctx.fd)
    os.close(tier._lock_fd)
    with DiskTier.open(config) as again:
        assert _served(again) == KEYS
