"""Where KV hints come from in a replay: each request's session, and the hints an orchestrator would send.

A session is a chain of turns, each turn's prompt extending an earlier one's (`clients.previous_turns`: the agentic
and conversation generators, the Mooncake format's shared block ids); a request no later turn extends and that
extends none is a one-off (no session, no hints: the unhinted traffic hints must not starve). Modes:

- `none`: no hints;
- `oracle`: an orchestrator that knows when each session comes back: every turn but the last retains its prefix
  until just past the next turn's arrival; the last turn releases the session;
- `ttl`: a realistic one: every turn retains its session for a fixed `ttl_s` (it cannot know which turn is last).

Hints carry the request's time on the trace's clock (`issued_at_s`): its arrival time when the phase has them, else
its position in the phase (one "second" per request: the clock both engines share when they send one request at a
time), so the dry and the live engine expire the same retentions at the same requests whatever their own clocks.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from toolkit.errors import BadInput
from toolkit.workloads.clients import previous_turns
from toolkit.workloads.traces import Trace, TraceRequest

HINT_MODES = ("none", "oracle", "ttl")
DEFAULT_TTL_S = 32.0
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
