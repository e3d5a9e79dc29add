"""Request streams for the harness: phases of prompts added in waves, with device prefix-cache resets between."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from toolkit.engines.harness.driver import Harness


@dataclass
class Phase:
    """One phase of a request stream: prompts added in waves of `wave` requests (all at once when 0), optionally
    after a device prefix-cache reset (the CPU tier is kept unless `reset_connector`)."""

    name: str
    prompts: dict[str, list[int]]
    max_tokens: int = 1
    reset_before: bool = False
    reset_connector: bool = False
    wave: int = 0


def run_phases(
    harness: Harness, phases: Iterable[Phase], *, timeout_s: float = 60.0, stall_steps: int | None = None
) -> dict[str, dict[str, Any]]:
    """Drive the phases in order; a refused reset raises (a hot phase would silently measure device hits).
    Returns, per phase, the harness's `RequestRecord` of each of its requests. A wave still busy after `timeout_s`
    raises; with `stall_steps` (instant worker only) a wave whose scheduler stops scheduling raises `HarnessStalled`
    at once (the parked-loads deadlock)."""
    results: dict[str, dict[str, Any]] = {}
    for phase in phases:
        if phase.reset_before:
            if not harness.drain_and_reset(
                timeout_s=timeout_s, stall_steps=stall_steps, reset_connector=phase.reset_connector
            ):
                raise RuntimeError(f"phase {phase.name}: reset_prefix_cache() refused after draining")
        items = list(phase.prompts.items())
        wave = phase.wave or len(items) or 1
        for start in range(0, len(items), wave):
            for req_id, tokens in items[start : start + wave]:
                harness.add(req_id, tokens, phase.max_tokens)
            harness.run_until_idle(timeout_s=timeout_s, stall_steps=stall_steps)
        results[phase.name] = {req_id: harness.requests[req_id] for req_id in phase.prompts}
    return results
