"""A store that is down, stops answering or is full: counted misses and refused writes, never a hang or an
exception out of the tier. Every wait here is bounded by the tier's own op timeout (0.5 s)."""

from __future__ import annotations

import socket
import time

from shared_rig import BLOCK_BYTES, config, needs_store, payload

from toolkit.tiers.shared import Refused, SharedTier, StoreServer

pytestmark = needs_store
OP_TIMEOUT_S = 0.5


def _write(tier: SharedTier, keys: list[bytes]) -> list[str]:
    reasons = []
    for key in keys:
        got = tier.submit_write("attn", key, payload(len(reasons)))
        reasons.extend([got.value] if isinstance(got, Refused) else [c.reason for c in tier.wait_all()])
    return reasons


def _read(tier: SharedTier, key: bytes) -> tuple[str, float]:
    start = time.monotonic()
    got = tier.submit_read("attn", key, bytearray(BLOCK_BYTES))
    if isinstance(got, Refused):
        return got.value, time.monotonic() - start
    (done,) = tier.wait_all()
    return done.reason, time.monotonic() - start


def test_a_store_that_is_not_there_is_unavailable_at_once():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        start = time.monotonic()
        tier = SharedTier.connect(config(f"127.0.0.1:{port}", connect_timeout_s=2.0))
    assert not tier.available and "unreachable" in tier.down_reason
    # the disk tier's reasons (the cascade's contract): a write with nowhere to go is FULL, a read is a MISS
    assert tier.submit_write("attn", b"k", payload(0)) is Refused.FULL
    assert tier.submit_read("attn", b"k", bytearray(BLOCK_BYTES)) is Refused.MISS
    assert not tier.contains("attn", b"k") and tier.poll() == []
    tier.close()
    assert time.monotonic() - start < 3.0
    assert tier.stats().refused_unavailable == 3


def test_a_tier_started_before_its_store_connects_once_the_store_is_up():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tier = SharedTier.connect(config(f"127.0.0.1:{port}", connect_timeout_s=1.0, pause_s=0.2))
    assert not tier.available and "unreachable" in tier.down_reason
    with StoreServer(16 << 20, rpc_port=port):
        deadline = time.monotonic() + 15  # an attempt at most every pause_s, off this thread
        got = tier.submit_write("attn", b"late", payload(3))
        while isinstance(got, Refused) and time.monotonic() < deadline:
            time.sleep(0.05)
            got = tier.submit_write("attn", b"late", payload(3))
        assert isinstance(got, int) and tier.available and tier.down_reason == ""
        assert [c.reason for c in tier.wait_all()] == ["ok"]
        dest = bytearray(BLOCK_BYTES)
        tier.submit_read("attn", b"late", dest)
        assert [c.reason for c in tier.wait_all()] == ["ok"] and dest == payload(3)
        tier.close()
    assert tier.stats().refused_unavailable >= 1


def test_server_killed_mid_run_means_misses_then_a_pause_never_a_hang():
    with StoreServer(32 << 20) as server:
        tier = SharedTier.connect(config(server.master, op_timeout_s=OP_TIMEOUT_S, failures_to_pause=3, pause_s=30))
        assert _write(tier, [b"a", b"b"]) == ["ok", "ok"] and _read(tier, b"a")[0] == "ok"
        server.kill()
        outcomes = [_read(tier, b"b") for _ in range(5)]
        tier.close()
    reasons = [reason for reason, _ in outcomes]
    assert all(elapsed < OP_TIMEOUT_S + 0.5 for _, elapsed in outcomes), outcomes
    assert "ok" not in reasons and reasons[-1] == "miss", reasons  # paused after 3 failures in a row: refused now
    s = tier.stats()
    assert s.hits == 1 and s.pauses == 1 and s.refused_unavailable >= 1
    assert s.read_errors + s.reads_timed_out == 3, s


def test_a_store_that_stops_answering_times_out_pauses_and_recovers():
    with StoreServer(32 << 20) as server:
        tier = SharedTier.connect(config(server.master, op_timeout_s=OP_TIMEOUT_S, failures_to_pause=2, pause_s=1.0))
        assert _write(tier, [b"slow"]) == ["ok"]
        server.pause()  # SIGSTOP: its calls would wait ~30 s (the client's RPC timeout)
        lookup = tier.submit_lookup("attn", [b"slow", b"other"])
        assert isinstance(lookup, int) and tier.lookup_result(lookup) is None  # asked, never waited for
        first, second, third = (_read(tier, b"slow") for _ in range(3))
        assert first[0] == second[0] == "timeout" and third[0] == "miss"  # paused: refused at once
        assert tier.lookup_result(lookup) == (False, False)  # past its deadline: no hit
        assert all(elapsed < OP_TIMEOUT_S + 0.5 for _, elapsed in (first, second, third))
        server.resume()
        time.sleep(1.2)  # the pause is over; the two stuck calls get their answers and are dropped
        deadline = time.monotonic() + 10
        reason = ""
        while reason != "ok" and time.monotonic() < deadline:
            reason = _read(tier, b"slow")[0]
        tier.close()
    assert reason == "ok"
    s = tier.stats()
    assert s.reads_timed_out >= 2 and s.pauses >= 1 and s.hits >= 1 and s.lookups_unanswered == 1
    assert s.refused_unavailable >= 1


def test_a_full_store_refuses_writes_and_counts_them():
    with StoreServer(16 << 20) as server, SharedTier.connect(config(server.master)) as tier:
        reasons = _write(tier, [b"fill%d" % n for n in range(3 * (16 << 20) // BLOCK_BYTES)])
        s = tier.stats()
    assert reasons.count("full") == s.writes_refused_full > 0
    assert s.writes_ok == reasons.count("ok") > 0 and s.writes_failed == 0 and s.pauses == 0
