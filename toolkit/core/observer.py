"""One way to watch the offload manager: subscribers receive its events; one helper times calls.

    class Seen(OffloadObserver):
        def on_lookup(self, request_id, local_tokens, result): ...

    subscribe(manager, Seen())      # several subscribers fan out; unsubscribe(manager, obs) removes one

Events, emitted by the manager's public methods after they decided (a subscriber only reads, it never changes
what the manager does):
- `on_lookup(request_id, local_tokens, result)`: every `lookup` (the `LookupResult`, pins already taken);
- `on_load_planned(request_id, plan)`: every `prepare_load` that returned a plan (declined plans included);
- `on_store_committed(store)`: a store event built by `build_step` (its `TransferBatch`);
- `on_step(step, meta)`: the end of every `build_step` (its `StepInput` and `StepMetadata`);
- `on_event(event)`: with `wants_events = True`, every event of the manager's one typed stream
  (`toolkit.core.events`: lookups, loads sent/done/failed/declined, stores sent/done, hand-offs, evictions, reset).

Zero cost when nobody listens: the manager holds `observer = None` and each emission is one attribute test.
Counts are not kept here: the manager's `MissStats` and the connector's counters are the one set of counts
(`toolkit.vllm.metrics` derives its interval stats from them).
"""

from __future__ import annotations

from typing import Iterable, Protocol

from toolkit.core.event_log import EventLog
from toolkit.core.events import ManagerEvent
from toolkit.core.load.pairing import LoadPlan
from toolkit.core.lookup.result import LookupResult
from toolkit.core.metadata import StepMetadata, TransferBatch
from toolkit.core.requests import StepInput


class OffloadObserver:
    """A subscriber: every event is a no-op here; override the ones you need.

    `needs_lookup_diagnosis`: set True when `on_lookup` reads the per-group reach and reasons
    (`LookupResult.group_reach_tokens`, `group_miss_reasons`); subscribing turns the manager's diagnosis on.
    """

    needs_lookup_diagnosis = False
    wants_events = False  # True: `on_event` receives the manager's event stream (the manager then builds events)

    def on_lookup(self, request_id: str, local_tokens: int, result: LookupResult) -> None:
        pass

    def on_load_planned(self, request_id: str, plan: LoadPlan) -> None:
        pass

    def on_store_committed(self, store: TransferBatch) -> None:
        pass

    def on_step(self, step: StepInput, meta: StepMetadata) -> None:
        pass

    def on_event(self, event: ManagerEvent) -> None:
        pass


class FanOut(OffloadObserver):
    """Several subscribers behind the manager's one `observer` slot, called in subscription order."""

    def __init__(self, observers: Iterable[OffloadObserver] = ()) -> None:
        self.observers: list[OffloadObserver] = list(observers)

    @property
    def needs_lookup_diagnosis(self) -> bool:  # type: ignore[override]
        return any(o.needs_lookup_diagnosis for o in self.observers)

    def on_lookup(self, request_id: str, local_tokens: int, result: LookupResult) -> None:
        for observer in self.observers:
            observer.on_lookup(request_id, local_tokens, result)

    def on_load_planned(self, request_id: str, plan: LoadPlan) -> None:
        for observer in self.observers:
            observer.on_load_planned(request_id, plan)

    def on_store_committed(self, store: TransferBatch) -> None:
        for observer in self.observers:
            observer.on_store_committed(store)

    def on_step(self, step: StepInput, meta: StepMetadata) -> None:
        for observer in self.observers:
            observer.on_step(step, meta)

    @property
    def wants_events(self) -> bool:  # type: ignore[override]
        return any(o.wants_events for o in self.observers)

    def on_event(self, event: ManagerEvent) -> None:
        for observer in self.observers:
            if observer.wants_events:
                observer.on_event(event)


class Observable(Protocol):
    """What subscribing needs of a manager: its one observer slot, its lookup-diagnosis switch and its event log
    (told of every change of the slot, so events reach the observers that want them)."""

    observer: OffloadObserver | None
    diagnose_lookups: bool
    event_log: EventLog


def subscribe(manager: Observable, observer: OffloadObserver) -> OffloadObserver:
    """Add `observer` to `manager`'s subscribers (a second one turns the slot into a `FanOut`); returns it."""
    if not isinstance(observer, OffloadObserver):
        raise ValueError(f"observer: must be an OffloadObserver, got {type(observer).__name__}")
    current = manager.observer
    if current is None:
        manager.observer = observer
    elif isinstance(current, FanOut):
        current.observers.append(observer)
    else:
        manager.observer = FanOut([current, observer])
    if observer.needs_lookup_diagnosis:
        manager.diagnose_lookups = True
    manager.event_log.watch(manager.observer)
    return observer


def unsubscribe(manager: Observable, observer: OffloadObserver) -> None:
    """Remove `observer`; the slot goes back to None when nobody is left (no cost on the hot path again).
    The lookup diagnosis stays as it is (another part may have asked for it)."""
    current = manager.observer
    if current is observer:
        manager.observer = None
    elif isinstance(current, FanOut) and observer in current.observers:
        current.observers.remove(observer)
        if len(current.observers) == 1:
            manager.observer = current.observers[0]
        elif not current.observers:
            manager.observer = None
    else:
        raise ValueError(f"observer: {type(observer).__name__} is not subscribed to this manager")
    manager.event_log.watch(manager.observer)


class CallTimer:
    """Wall time and number of calls, added to by whoever times them (the connector's timed subclass,
    `toolkit.engines.harness.timed`; benchmarks' timed manager subclasses).

    `perf_counter` (wall clock), not `thread_time`: a thread-CPU-time read is a system call that costs ~15x more,
    which the timing would add to every call it measures; benchmarks keep the best of repeated runs, so other
    tenants' preemptions do not decide the result.
    """

    __slots__ = ("seconds", "calls")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def reset(self) -> None:
        self.seconds = 0.0
        self.calls = 0
