"""What the tools read at vLLM's connector boundary: the scheduler hooks' wall time, and what each request was
admitted with, through a subclass of the connector (no method of an instance or of vLLM is replaced).

Connector-agnostic on purpose: the engine-less harness and the live engine also run vLLM's own SimpleCPU
connector (`toolkit.vllm.reference`), which has no `OffloadManager` to subscribe to, so what vLLM asked the
connector (local tokens at lookup, external tokens at allocation) and the hooks' wall time are read at the
connector's boundary. What the toolkit's own manager decides is observed through `toolkit.core.observer` instead.

`timed_subclass(base)` makes `Timed<base>`, whose hooks report to the instance's `hook_watch` (None: the base's
hook, one attribute test more). `timed_connectors` holds one per connector the tools run, and `timed_transfer_config`
points vLLM's `kv_transfer_config` at it. This module imports no vLLM: the transfer config is built before vLLM is.
"""

from __future__ import annotations

import functools
import operator
import sys
import time
from dataclasses import dataclass
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
TIMED_MODULE = "toolkit.engines.harness.timed_connectors"
TIMED_PREFIX = "Timed"


@dataclass(slots=True)
class HookWatch:
    """What one connector instance reports: with `timer`, every hook's wall time; `on_matched(request_id,
    num_computed_tokens)` after each lookup, `on_admitted(request_id, num_external_tokens)` after each allocation."""

    timer: CallTimer | None = None
    on_matched: Callable[[str, int], None] | None = None
    on_admitted: Callable[[str, int], None] | None = None

    def after(self, name: str, args: tuple[Any, ...]) -> None:
        if name == "get_num_new_matched_tokens":
            if self.on_matched is not None:
                self.on_matched(args[0].request_id, args[1])
        elif name == "update_state_after_alloc" and self.on_admitted is not None:
            self.on_admitted(args[0].request_id, args[2])


# Set by `mark_hook_calls()`: every hook of a timed subclass made after it runs inside `operator.call`, a C function
# that frames exactly the hooks' work, so valgrind's callgrind can count only it (`toggle-collect`).
_CALL_MARKER: Callable[..., Any] | None = None
CALL_MARKER_SYMBOL = "_operator_call"  # the C function behind `operator.call`, as callgrind names it
_OPERATOR_CALL: Callable[..., Any] | None = getattr(operator, "call", None)  # Python 3.11+
CALL_MARKER_AVAILABLE = _OPERATOR_CALL is not None


def mark_hook_calls() -> None:
    """Run every hook of the timed subclasses made from now on inside `operator.call` (`CALL_MARKER_SYMBOL`)."""
    global _CALL_MARKER
    if _OPERATOR_CALL is None:
        raise RuntimeError(f"mark_hook_calls: needs operator.call (Python 3.11+), this is {sys.version.split()[0]}")
    _CALL_MARKER = _OPERATOR_CALL


def _watched_hook(name: str, hook: Callable[..., Any]) -> Callable[..., Any]:
    admission = name in ADMISSION_HOOKS
    clock = time.perf_counter
    doc = hook.__doc__
    if _CALL_MARKER is not None:
        hook = functools.partial(_CALL_MARKER, hook)

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        watch: HookWatch | None = self.hook_watch
        if watch is None:
            return hook(self, *args, **kwargs)
        timer = watch.timer
        if timer is None:
            result = hook(self, *args, **kwargs)
        else:
            start = clock()
            try:
                result = hook(self, *args, **kwargs)
            finally:
                timer.seconds += clock() - start
                timer.calls += 1
        if admission:
            watch.after(name, args)  # outside the timed section: the tools' bookkeeping is not the connector's
        return result

    watched.__name__ = watched.__qualname__ = name
    watched.__doc__ = doc
    return watched


def timed_subclass(base: type) -> type:
    """`Timed<base>`: `base` with each hook of `HOOKS` it has reporting to the instance's `hook_watch`."""
    namespace: dict[str, Any] = {"hook_watch": None, "__module__": TIMED_MODULE}
    for name in HOOKS:
        hook = getattr(base, name, None)
        if hook is not None:
            namespace[name] = _watched_hook(name, hook)
    return type(TIMED_PREFIX + base.__name__, (base,), namespace)


def timed_transfer_config(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """`config` (a `kv_transfer_config` dict) with its connector replaced by the timed subclass of it."""
    if config is None:
        return None
    return {**config, "kv_connector": TIMED_PREFIX + config["kv_connector"], "kv_connector_module_path": TIMED_MODULE}


def watch_connector(
    connector: Any,
    *,
    timer: CallTimer | None = None,
    on_matched: Callable[[str, int], None] | None = None,
    on_admitted: Callable[[str, int], None] | None = None,
) -> None:
    """Make a timed connector (built from `timed_transfer_config`) report to `timer`, `on_matched`, `on_admitted`."""
    if not hasattr(type(connector), "hook_watch"):
        raise TypeError(f"connector: {type(connector).__name__} is not a timed connector (timed_transfer_config)")
    connector.hook_watch = HookWatch(timer, on_matched, on_admitted)
