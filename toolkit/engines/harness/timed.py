"""The one place that wraps a vLLM connector's scheduler hooks: timing, and what each request was admitted with.

Connector-agnostic on purpose: the engine-less harness and the live engine also run vLLM's own SimpleCPU
connector (and the reference one), which have no `OffloadManager` to subscribe to, so what vLLM asked the
connector (local tokens at lookup, external tokens at allocation) and the hooks' wall time are read at vLLM's
connector boundary. What the toolkit's own manager decides is observed through `toolkit.core.observer` instead.
"""

from __future__ import annotations

from typing import Any, Callable

from toolkit.core.observer import CallTimer

HOOKS = (
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "update_connector_output",
    "request_finished",
    "request_finished_all_groups",
    "take_events",
    "has_pending_push_work",
    "get_kv_connector_stats",
)
ADMISSION_HOOKS = ("get_num_new_matched_tokens", "update_state_after_alloc")


def watch_connector(
    connector: Any,
    *,
    timer: CallTimer | None = None,
    on_matched: Callable[[str, int], None] | None = None,
    on_admitted: Callable[[str, int], None] | None = None,
) -> None:
    """Wrap the connector's hooks (on the instance): with `timer`, every hook of `HOOKS` adds its wall time to it;
    `on_matched(request_id, num_computed_tokens)` after each lookup, `on_admitted(request_id,
    num_external_tokens)` after each allocation. Without a timer only the two admission hooks are wrapped."""

    def after(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: object) -> None:
        if name == "get_num_new_matched_tokens":
            if on_matched is not None:
                on_matched(args[0].request_id, args[1])
        elif name == "update_state_after_alloc" and on_admitted is not None:
            on_admitted(args[0].request_id, args[2])

    watch = after if on_matched is not None or on_admitted is not None else None
    if timer is not None:
        timer.wrap(connector, HOOKS, after=watch)
    elif watch is not None:
        CallTimer().wrap(connector, ADMISSION_HOOKS, after=watch)
