"""Where KV hints come from in a replay: each request's session, and the hints an orchestrator would send.

A session is a chain of turns, each turn's prompt extending an earlier one's (`clients.previous_turns`: the agentic
and conversation generators, the Mooncake format's shared block ids); a request no later turn extends and that
extends none is a one-off (no session, no hints: the unhinted traffic hints must not starve). Modes:

- `none`: no hints;
- `oracle`: an orchestrator that knows when each session comes back: every turn but the last retains its prefix
  until just past the next turn's arrival; the last turn releases the session;
- `ttl`: a realistic one: every turn retains its session for a fixed `ttl_s` (it cannot know which turn is last);
- `adaptive`: a realistic one that learns: every turn retains its session for `ADAPTIVE_GAP_FACTOR` times the gap it
  expects before the session's next turn, clamped to [`ADAPTIVE_FLOOR_S`, `ADAPTIVE_CAP_FACTOR` x `ttl_s`]; the
  expected gap is the session's own last inter-turn gap, or before its second turn the median of every gap seen so
  far in any session (`ttl_s` before any). It reads only turns that have arrived (`adaptive_ttls`: no look-ahead)
  and never releases: a chat orchestrator cannot tell a session's last turn (the user just stops).

Hints carry the request's time on the trace's clock (`issued_at_s`): its arrival time when the phase has them, else
its position in the phase (one "second" per request: the clock both engines share when they send one request at a
time), so the dry and the live engine expire the same retentions at the same requests whatever their own clocks.
"""

from __future__ import annotations

import bisect
from typing import Any, Mapping, Sequence

from toolkit.errors import BadInput
from toolkit.workloads.clients import previous_turns
from toolkit.workloads.traces import Trace, TraceRequest

HINT_MODES = ("none", "oracle", "ttl", "adaptive")
DEFAULT_TTL_S = 32.0
ADAPTIVE_GAP_FACTOR = 1.5  # retain for this many expected gaps: a turn a little late still hits
ADAPTIVE_FLOOR_S = 1.0  # the shortest retention (trace seconds): a session that came straight back
ADAPTIVE_CAP_FACTOR = 4.0  # the longest retention, in `ttl_s`: a session idle for long is not held forever
ORACLE_SLACK_S = 0.5  # past the next turn's arrival: its hints and lookup come at that instant


def sessions_of(trace: Trace) -> dict[str, str]:
    """request_id -> session id (its first turn's request id), for every request in a session of >= 2 turns."""
    previous = previous_turns(trace)
    session: dict[str, str] = {}
    for req in trace.requests:
        prev = previous.get(req.request_id)
        session[req.request_id] = session.get(prev, prev) if prev is not None else req.request_id
    sizes: dict[str, int] = {}
    for sid in session.values():
        sizes[sid] = sizes.get(sid, 0) + 1
    return {rid: sid for rid, sid in session.items() if sizes[sid] > 1}


def eviction_for(eviction: str, mode: str) -> str:
    """The connector's eviction policy for a hint mode: the hint-aware variant of `eviction` when hints are sent."""
    return eviction if mode == "none" or eviction.endswith("+hints") else f"{eviction}+hints"


def trace_times(requests: Sequence[TraceRequest]) -> list[float]:
    """Each request's time on the trace's clock: arrival times when the phase has any, else positions."""
    if any(r.arrival_s for r in requests):
        return [float(r.arrival_s) for r in requests]
    return [float(i) for i in range(len(requests))]


def _envelope(request_id: str, action_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    action = {"action_id": f"{request_id}/{action_type}", "action_type": action_type, "action_version": "1"}
    return {"protocol_version": "1", "message_id": request_id, "actions": [{**action, "payload": payload}]}


def adaptive_ttls(
    requests: Sequence[TraceRequest], sessions: Mapping[str, str], times: Sequence[float], ttl_s: float
) -> dict[str, float]:
    """request_id -> the `adaptive` mode's retention (seconds) for each session turn, computed online: request i's
    value reads the times and sessions of requests 0..i only (the orchestrator sees each turn as it arrives)."""
    last_seen_s: dict[str, float] = {}
    last_gap_s: dict[str, float] = {}
    gaps_s: list[float] = []  # every inter-turn gap seen so far, sorted (the median for a session's first turn)
    out: dict[str, float] = {}
    for req, now in zip(requests, times):
        sid = sessions.get(req.request_id)
        if sid is None:
            continue
        if sid in last_seen_s:
            gap = now - last_seen_s[sid]
            last_gap_s[sid] = gap
            bisect.insort(gaps_s, gap)
        last_seen_s[sid] = now
        expected = last_gap_s.get(sid, gaps_s[len(gaps_s) // 2] if gaps_s else ttl_s)
        out[req.request_id] = min(max(ADAPTIVE_GAP_FACTOR * expected, ADAPTIVE_FLOOR_S), ADAPTIVE_CAP_FACTOR * ttl_s)
    return out


def synthesise_hints(
    requests: Sequence[TraceRequest], sessions: Mapping[str, str], mode: str, *, ttl_s: float = DEFAULT_TTL_S
) -> dict[str, dict[str, Any]]:
    """request_id -> plain hint envelope (`toolkit.vllm.hints.to_envelope` makes vLLM's) for `mode`."""
    if mode not in HINT_MODES:
        raise BadInput(f"hints: unknown mode {mode!r}; valid: {', '.join(HINT_MODES)}")
    if not ttl_s > 0:
        raise BadInput(f"hint_ttl_s: must be > 0 seconds, got {ttl_s}")
    if mode == "none":
        return {}
    times = trace_times(requests)
    if mode == "adaptive":
        ttls = adaptive_ttls(requests, sessions, times, ttl_s)
        return {
            req.request_id: _envelope(
                req.request_id,
                "retain",
                {"session_id": sessions[req.request_id], "issued_at_s": now, "ttl_s": ttls[req.request_id]},
            )
            for req, now in zip(requests, times)
            if req.request_id in ttls
        }
    next_time: dict[str, float] = {}
    out: dict[str, dict[str, Any]] = {}
    for i in range(len(requests) - 1, -1, -1):  # backwards: each turn learns its session's next arrival
        req, now = requests[i], times[i]
        sid = sessions.get(req.request_id)
        if sid is None:
            continue
        base = {"session_id": sid, "issued_at_s": now}
        if mode == "ttl":
            out[req.request_id] = _envelope(req.request_id, "retain", {**base, "ttl_s": ttl_s})
        elif sid in next_time:
            gap = next_time[sid] - now + ORACLE_SLACK_S
            out[req.request_id] = _envelope(req.request_id, "retain", {**base, "ttl_s": gap})
        else:
            out[req.request_id] = _envelope(req.request_id, "release", base)
        next_time[sid] = now
    return out
