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
