"""vLLM's KV-hint envelope in and out: `request.kv_hints` to the core's plain input, plain hints to vLLM's structs.

vLLM (0.32 to 0.34) carries an orchestrator's hints as `vllm.v1.kv_hints.KvHintsEnvelope` on `Request.kv_hints`,
set from `LLMEngine.add_request(kv_hints=...)` and `AsyncLLM.generate(kv_hints=...)` alike, so the scheduler side
reads one attribute whichever API sent the request. The core (`toolkit.core.hints`) validates plain builtins only:
anything here that is not an envelope is handed on as it is and counted there as `not_an_envelope`.
"""

from __future__ import annotations

from typing import Any, Mapping

import msgspec

_ABSENT = object()


def envelope_builtins(request: Any) -> Any:
    """The request's hints as plain builtins (dicts, lists, str, numbers), or None when it carries none."""
    hints = getattr(request, "kv_hints", None)
    if hints is None:
        return None
    if isinstance(hints, msgspec.Struct):
        try:
            return msgspec.to_builtins(hints)
        except (TypeError, ValueError, msgspec.MsgspecError):
            return _ABSENT  # an unencodable payload: refused by the parser as not an envelope
    return hints


def to_envelope(plain: Mapping[str, Any]) -> Any:
    """vLLM's `KvHintsEnvelope` from plain hints (`toolkit.workloads.hints` makes them). The fields are made the
    types vLLM's structs declare (so the envelope survives vLLM's msgspec IPC), their values passed as they are:
    a bad action reaches the connector and is counted there. Entries that are not mappings are left out."""
    from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope

    actions = [
        KvHintAction(
            action_id=str(a.get("action_id", "")),
            action_type=str(a.get("action_type", "")),
            action_version=str(a.get("action_version", "")),
            payload=dict(payload) if isinstance(payload := a.get("payload"), Mapping) else {},
        )
        for a in plain.get("actions", ())
        if isinstance(a, Mapping)
    ]
    return KvHintsEnvelope(
        protocol_version=str(plain.get("protocol_version", "1")),
        message_id=str(plain.get("message_id", "")),
        actions=actions,
    )


# `HintStats` counters exported as `vllm:kvtk_hints_total{outcome=...}`, and the gauges as `kvtk_hint_tier{fact=...}`.
HINT_COUNTERS = (
    "received",
    "accepted",
    "not_applied",
    "no_lower_tier",
    "no_upper_tier",
    "sessions_expired",
    "sessions_released",
    "hits_on_retained_blocks",
    "hits_on_released_blocks",
)
HINT_GAUGES = ("sessions_retained", "retained_free_blocks", "retained_free_bytes", "budget_blocks")


def add_hint_stats(stats: Any, now: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    """The interval's hint counters and the current gauges into `stats` (a `metrics.HybridOffloadStats`), from two
    `SchedulerSide.counts()` snapshots; nothing when no hint arrived (their `hints` entry is empty)."""
    h_now, h_before = now.get("hints") or {}, before.get("hints") or {}
    if not h_now:
        return
    for name in HINT_COUNTERS:
        stats.add("hints", h_now.get(name, 0) - h_before.get(name, 0), name)
    rejected_before = h_before.get("rejected_by_reason", {})
    for reason, count in h_now.get("rejected_by_reason", {}).items():
        stats.add("hints_rejected", count - rejected_before.get(reason, 0), reason)
    for fact in HINT_GAUGES:
        stats.set("hint_tier", h_now.get(fact, 0), fact)


class PhaseHintColumns:
    """A run's phase-row columns for the hints (`Engine.phase_extra`): per-phase counts and the segments' state at
    the phase's end, from the toolkit connector's scheduler side; no columns where no hint arrived (or another
    connector runs), so unhinted runs' rows are unchanged."""

    COUNTED = ("received", "accepted", "hits_on_retained_blocks", "sessions_expired", "sessions_released")

    def __init__(self) -> None:
        self._before: dict[str, Any] = {}

    def take(self, connector: Any) -> dict[str, Any]:
        side = getattr(connector, "scheduler_side", None)
        counts: dict[str, Any] = side.hint_counts() if side is not None else {}
        if not counts:
            return {}
        before, self._before = self._before, counts
        out: dict[str, Any] = {f"hints_{name}": counts[name] - before.get(name, 0) for name in self.COUNTED}
        rejected_before = sum(before.get("rejected_by_reason", {}).values())
        out["hints_rejected"] = sum(counts["rejected_by_reason"].values()) - rejected_before
        for fact in ("retained_free_blocks", "retained_free_bytes", "budget_blocks"):
            out[f"hint_{fact}"] = counts[fact]
        return out
