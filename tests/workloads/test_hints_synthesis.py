"""Hints synthesised from a trace (`kvtk replay --hints`): sessions from the turns, oracle and TTL envelopes that the
connector's parser accepts whole."""

from __future__ import annotations

import pytest

from toolkit.core.hints.schema import HintKind, parse_envelope
from toolkit.errors import BadInput
from toolkit.workloads.generators import agentic
from toolkit.workloads.hints import eviction_for, sessions_of, synthesise_hints
from toolkit.workloads.hints_conversation import conversation, with_scan


def test_sessions_are_chains_of_turns_and_one_offs_have_none() -> None:
    trace = with_scan(agentic(num_sessions=2, num_turns=3), every=2, prompt_tokens=50)
    sessions = sessions_of(trace)
    assert sessions["ag-s1-t2"] == sessions["ag-s1-t0"] == "ag-s1-t0" != sessions["ag-s0-t1"]
    assert not any(rid.startswith("scan-") for rid in sessions)
    assert len(sessions) == 6


def test_the_oracle_retains_until_the_next_turn_and_releases_after_the_last() -> None:
    trace = conversation(num_sessions=3, max_turns=4, first_tokens=64, user_tokens=8, assistant_tokens=8)
    hints = synthesise_hints(trace.requests, sessions_of(trace), "oracle")
    position = {r.request_id: i for i, r in enumerate(trace.requests)}
    by_session: dict[str, list[str]] = {}
    for req in trace.requests:
        by_session.setdefault(sessions_of(trace)[req.request_id], []).append(req.request_id)
    for turns in by_session.values():
        for turn, following in zip(turns, turns[1:]):
            (action,) = parse_envelope(hints[turn]).actions
            assert action.kind is HintKind.RETAIN and action.issued_at_s == position[turn]
            assert action.issued_at_s + action.ttl_s > position[following] > action.issued_at_s + action.ttl_s - 1
        (last,) = parse_envelope(hints[turns[-1]]).actions
        assert last.kind is HintKind.RELEASE


def test_ttl_retains_every_turn_and_none_sends_nothing() -> None:
    trace = agentic(num_sessions=2, num_turns=2, interarrival_s=0.5)
    ttl = synthesise_hints(trace.requests, sessions_of(trace), "ttl", ttl_s=7.0)
    parsed = [parse_envelope(ttl[r.request_id]) for r in trace.requests]
    assert all(p.rejected == {} and p.actions[0].ttl_s == 7.0 for p in parsed)
    assert [p.actions[0].issued_at_s for p in parsed] == [r.arrival_s for r in trace.requests]  # arrival times
    assert synthesise_hints(trace.requests, sessions_of(trace), "none") == {}
    with pytest.raises(BadInput, match="hints"):
        synthesise_hints(trace.requests, {}, "sometimes")
    assert (eviction_for("slru", "none"), eviction_for("lru", "ttl"), eviction_for("slru+hints", "oracle")) == (
        "slru",
        "lru+hints",
        "slru+hints",
    )


def test_adaptive_hints_are_computed_online_from_the_turns_so_far() -> None:
    """No look-ahead: request i's hint is the same whether the trace ends at i or goes on (session ids are the
    client's, known on arrival), and a turn's retention is 1.5x its session's last gap, clamped."""
    trace = with_scan(
        conversation(num_sessions=5, max_turns=5, first_tokens=64, user_tokens=8, assistant_tokens=8, seed=3),
        every=3,
        prompt_tokens=32,
    )
    sessions = sessions_of(trace)
    whole = synthesise_hints(trace.requests, sessions, "adaptive", ttl_s=10.0)
    for i, req in enumerate(trace.requests):
        prefix = synthesise_hints(trace.requests[: i + 1], sessions, "adaptive", ttl_s=10.0)
        assert prefix.get(req.request_id) == whole.get(req.request_id), req.request_id
    last_seen: dict[str, int] = {}
    ttls = set()
    for i, req in enumerate(trace.requests):
        sid = sessions.get(req.request_id)
        if sid is None:
            assert req.request_id not in whole
            continue
        (action,) = parse_envelope(whole[req.request_id]).actions
        assert action.kind is HintKind.RETAIN and action.issued_at_s == i  # never a release: the end is unknown
        if sid in last_seen:
            assert action.ttl_s == min(max(1.5 * (i - last_seen[sid]), 1.0), 40.0)
        last_seen[sid] = i
        ttls.add(action.ttl_s)
    assert len(ttls) > 3  # it adapts: not one TTL for all


def test_adaptive_hints_are_not_worse_than_a_fixed_ttl_on_agentic_sessions() -> None:
    from toolkit.bench.hints import run_cell, workloads

    trace = workloads(sessions=6, turns=4)["agentic"]
    stored = run_cell(trace, "slru", "none", model="tiny-qwen2", tp=1, cpu_blocks=1 << 20, ttl_s=12.0)["used_blocks"]
    tokens = {
        mode: run_cell(trace, ev, mode, model="tiny-qwen2", tp=1, cpu_blocks=stored // 3, ttl_s=12.0)["cpu_tier_tokens"]
        for ev, mode in (("slru", "none"), ("slru+hints", "ttl"), ("slru+hints", "adaptive"))
    }
    assert tokens["adaptive"] >= tokens["ttl"] and tokens["adaptive"] > tokens["none"], tokens


def test_a_server_replay_with_hints_is_refused_before_a_folder(tmp_path, capsys) -> None:
    from toolkit.cli.main import main

    out = tmp_path / "run"
    argv = ["replay", "--engine", "server", "--url", "http://127.0.0.1:9", "--hints", "oracle", "--out", str(out)]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "hints" in line and "kv_hints" in line and not out.exists()
