"""The hint schema, version "1": what a `KvHintAction`'s JSON payload may say, validated on arrival.

vLLM's envelope (`vllm.v1.kv_hints.KvHintsEnvelope`: protocol_version, message_id, actions) leaves each action's
payload to the component that implements it. Ours, per `action_type` (`action_version` "1"):

    retain    {"session_id": str, "ttl_s": number > 0, "boundaries"?: int >= 1, "issued_at_s"?: number >= 0}
              keep this request's prefix (or only its last `boundaries` hash boundaries, every group) for `ttl_s`
              seconds after `issued_at_s`, or until the session is released
    pin       {"session_id", "boundaries"?, "issued_at_s"?}  retain with no end but a release; bounded by the
              tier's hint budget like every retained block
    release   {"session_id", "issued_at_s"?}  the session ended: its blocks become the first to go
    demote    {"session_id", "issued_at_s"?}  move to a lower tier (counted: the CPU tier has none below it)
    prefetch  {"session_id", "issued_at_s"?}  promote ahead of the next turn (counted: nothing above it to fill)

`issued_at_s` is the orchestrator's clock: TTLs count on it, so two engines sent the same hints expire them at the
same point whatever their own clocks say. A bad action (or a bad envelope) is never an error for the request: it is
dropped and counted under one `RejectReason`; the good actions of the same envelope still apply. Sizes are checked
before anything is copied: at most `MAX_ACTIONS` actions, `MAX_PAYLOAD_FIELDS` fields, ids of `MAX_ID_CHARS`.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ACTION_VERSION = "1"
MAX_ACTIONS = 16
MAX_PAYLOAD_FIELDS = 8
MAX_ID_CHARS = 256
MAX_TTL_S = 30 * 86400.0  # a month: longer is a typo or an attempt to hold the tier forever (pin says that)
MAX_BOUNDARIES = 1 << 20
MAX_TIME_S = 1e12


class HintKind(str, enum.Enum):
    RETAIN = "retain"
    PIN = "pin"
    RELEASE = "release"
    DEMOTE = "demote"
    PREFETCH = "prefetch"


class RejectReason(str, enum.Enum):
    """Why a hint was ignored; each value names a counter in the hint stats."""

    NOT_AN_ENVELOPE = "not_an_envelope"
    TOO_MANY_ACTIONS = "too_many_actions"
    NOT_AN_ACTION = "not_an_action"
    UNKNOWN_ACTION = "unknown_action"
    UNSUPPORTED_VERSION = "unsupported_version"
    BAD_PAYLOAD = "bad_payload"
    UNKNOWN_FIELD = "unknown_field"
    BAD_SESSION_ID = "bad_session_id"
    BAD_TTL = "bad_ttl"
    BAD_BOUNDARIES = "bad_boundaries"
    BAD_TIME = "bad_time"


_FIELDS: dict[HintKind, frozenset[str]] = {
    HintKind.RETAIN: frozenset({"session_id", "ttl_s", "boundaries", "issued_at_s"}),
    HintKind.PIN: frozenset({"session_id", "boundaries", "issued_at_s"}),
    HintKind.RELEASE: frozenset({"session_id", "issued_at_s"}),
    HintKind.DEMOTE: frozenset({"session_id", "issued_at_s"}),
    HintKind.PREFETCH: frozenset({"session_id", "issued_at_s"}),
}
_KINDS = {kind.value: kind for kind in HintKind}


@dataclass(frozen=True, slots=True)
class HintAction:
    """One valid action. `ttl_s` None: no end but a release (pin, or not a retention)."""

    kind: HintKind
    session_id: str
    ttl_s: float | None = None
    boundaries: int | None = None  # None: the whole prefix
    issued_at_s: float | None = None


@dataclass(slots=True)
class ParsedHints:
    actions: list[HintAction] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)  # RejectReason value -> actions (or envelopes) dropped
    num_received: int = 0  # actions seen (an envelope refused whole counts one)


class _Reject(Exception):
    def __init__(self, reason: RejectReason) -> None:
        self.reason = reason


def _number(value: Any, reason: RejectReason, *, low: float, high: float, strict_low: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Reject(reason)
    number = float(value)
    if not math.isfinite(number) or number > high or number < low or (strict_low and number == low):
        raise _Reject(reason)
    return number


def _action(raw: Any) -> HintAction:
    if not isinstance(raw, dict):
        raise _Reject(RejectReason.NOT_AN_ACTION)
    action_type = raw.get("action_type")
    kind = _KINDS.get(action_type) if isinstance(action_type, str) else None
    if kind is None:
        raise _Reject(RejectReason.UNKNOWN_ACTION)
    if raw.get("action_version") != ACTION_VERSION:
        raise _Reject(RejectReason.UNSUPPORTED_VERSION)
    payload = raw.get("payload")
    if not isinstance(payload, dict) or len(payload) > MAX_PAYLOAD_FIELDS:
        raise _Reject(RejectReason.BAD_PAYLOAD)
    if not set(payload) <= _FIELDS[kind]:
        raise _Reject(RejectReason.UNKNOWN_FIELD)
    session = payload.get("session_id")
    if not isinstance(session, str) or not 0 < len(session) <= MAX_ID_CHARS:
        raise _Reject(RejectReason.BAD_SESSION_ID)
    ttl_s = None
    if kind is HintKind.RETAIN:
        if "ttl_s" not in payload:
            raise _Reject(RejectReason.BAD_TTL)
        ttl_s = _number(payload["ttl_s"], RejectReason.BAD_TTL, low=0.0, high=MAX_TTL_S, strict_low=True)
    boundaries = payload.get("boundaries")
    if boundaries is not None and (
        isinstance(boundaries, bool) or not isinstance(boundaries, int) or not 1 <= boundaries <= MAX_BOUNDARIES
    ):
        raise _Reject(RejectReason.BAD_BOUNDARIES)
    issued = payload.get("issued_at_s")
    issued_at_s = None
    if issued is not None:
        issued_at_s = _number(issued, RejectReason.BAD_TIME, low=0.0, high=MAX_TIME_S, strict_low=False)
    return HintAction(kind, session, ttl_s, boundaries, issued_at_s)


def parse_envelope(raw: Any) -> ParsedHints:
    """Validate an envelope given as plain builtins (`msgspec.to_builtins` of vLLM's); never raises."""
    out = ParsedHints()
    if not isinstance(raw, dict) or not isinstance(raw.get("actions"), list):
        out.num_received = 1
        out.rejected[RejectReason.NOT_AN_ENVELOPE.value] += 1
        return out
    actions = raw["actions"]
    out.num_received = len(actions)
    if len(actions) > MAX_ACTIONS:
        out.rejected[RejectReason.TOO_MANY_ACTIONS.value] += len(actions)
        return out
    for item in actions:
        try:
            out.actions.append(_action(item))
        except _Reject as bad:
            out.rejected[bad.reason.value] += 1
    return out
