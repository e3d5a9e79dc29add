"""Closed-loop clients: which request is sent next when a trace has no arrival times and N clients share it.

`--concurrency N` models N clients that each send their next request when their previous one has finished: at most
N requests are in flight, and a finished one frees its client for the earliest request of the trace (in trace
order) that may go. A request may not go before the *previous turn of its session* has finished: no client can send
turn t+1 of a conversation before it has read turn t's answer. Both engines feed a phase through `ClosedLoop`, so
the dry engine (on its virtual clock) and the live engine (on vLLM's steps) make the same sending decisions.

Which mode feeds a phase (`clients_for`, read by both engines): with `--concurrency N`, N closed-loop clients; else,
when the requests carry arrival times, open loop (each request sent at phase start + its `arrival_s`, however many
are in flight); else the documented default, `DEFAULT_CLIENTS` (one) closed-loop client: one request at a time,
each sent when the previous one finished. In every mode a request *arrives* when it is sent and its queueing, TTFT
and end-to-end times count from then (`send_times` is the reference both engines are tested against).

Sessions are read from the trace's structure, not from a field: a request's previous turn is the latest earlier
request whose prompt parts are a proper prefix of its own parts (turn t of `agentic` is turn t-1's parts + the
answer + a new user message). A few-shot or long-document question shares only a segment with the others, never
a whole earlier prompt, so it depends on nothing; Mooncake requests (no parts) depend on nothing either.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Generic, Mapping, Protocol, Sequence, TypeVar

from toolkit.errors import BadInput

if TYPE_CHECKING:
    from toolkit.workloads.traces import Trace

DEFAULT_CLIENTS = 1  # without arrival times and without --concurrency: one request at a time, as a lone user sends


class Sendable(Protocol):
    """What the clients read of a request: a trace's request or an engine's phase request."""

    @property
    def request_id(self) -> str: ...

    @property
    def arrival_s(self) -> float: ...


RequestT = TypeVar("RequestT", bound=Sendable)


def clients_for(requests: Sequence[Sendable], concurrency: int | None) -> int | None:
    """How many closed-loop clients feed a phase on either engine: `concurrency` when given, else None (open loop)
    when any request carries an arrival time, else `DEFAULT_CLIENTS`."""
    if concurrency:
        return concurrency
    return None if any(r.arrival_s for r in requests) else DEFAULT_CLIENTS


def send_times(
    requests: Sequence[Sendable],
    concurrency: int | None,
    service_s: Mapping[str, float],
    after: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """The reference for both engines: when each request is sent (seconds from phase start), given how long each one
    takes from its send to its finish (`service_s`). Open loop: its arrival time. Closed loop: `ClosedLoop`'s
    clients, requests that finish at the same instant freeing their clients together (as in one engine step)."""
    clients = clients_for(requests, concurrency)
    if clients is None:
        return {r.request_id: float(r.arrival_s) for r in requests}
    loop, now, sent = ClosedLoop(requests, clients, after), 0.0, dict[str, float]()
    running: list[tuple[float, str]] = []
    while not loop.done:
        for req in loop.take():
            sent[req.request_id] = now
            heapq.heappush(running, (now + service_s[req.request_id], req.request_id))
        now, first = heapq.heappop(running)
        loop.finish(first)
        while running and running[0][0] == now:
            loop.finish(heapq.heappop(running)[1])
    return sent


def previous_turns(trace: Trace) -> dict[str, str]:
    """request_id -> the request_id of its session's previous turn, for the requests that have one."""
    seen: dict[tuple[str | tuple[int, ...], ...], str] = {}
    out: dict[str, str] = {}
    for req in trace.requests:
        parts = tuple(req.parts)
        for cut in range(len(parts) - 1, 0, -1):  # longest proper prefix first: the latest turn it extends
            prev = seen.get(parts[:cut])
            if prev is not None:
                out[req.request_id] = prev
                break
        if parts:
            seen[parts] = req.request_id
    return out


class ClosedLoop(Generic[RequestT]):
    """Sends a phase's requests (in trace order) through `concurrency` clients, each turn after its previous turn.

    `take()` returns the requests to send now (it frees no client); `finish(request_id)` frees one. A previous turn
    outside the phase (cut off by --max-requests, or another phase's) holds nothing back.
    """

    def __init__(self, requests: Sequence[RequestT], concurrency: int, after: Mapping[str, str] | None = None) -> None:
        if concurrency < 1:
            raise BadInput(f"concurrency: must be >= 1 client, got {concurrency}")
        self._requests = list(requests)
        self._index = {r.request_id: i for i, r in enumerate(self._requests)}
        self._after = {k: v for k, v in (after or {}).items() if k in self._index and v in self._index}
        self.concurrency = concurrency
        self._cursor = 0  # the next request in trace order not yet looked at
        self._ready: list[int] = []  # released turns (trace indices), a heap
        self._held: dict[str, list[int]] = {}  # previous turn's id -> turns waiting for it
        self._finished: set[str] = set()
        self.in_flight: set[str] = set()
        self.num_sent = 0
        self.max_in_flight = 0

    @property
    def done(self) -> bool:
        return self.num_sent == len(self._requests) and not self.in_flight

    def take(self) -> list[RequestT]:
        out: list[RequestT] = []
        while len(self.in_flight) < self.concurrency:
            index = self._next_index()
            if index is None:
                break
            req = self._requests[index]
            self.in_flight.add(req.request_id)
            self.num_sent += 1
            out.append(req)
        self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        # Nothing in flight and nothing sendable with requests left would wait forever: a broken session chain.
        assert self.in_flight or self.num_sent == len(self._requests), (self.num_sent, len(self._requests))
        return out

    def finish(self, request_id: str) -> None:
        self.in_flight.remove(request_id)
        self._finished.add(request_id)
        for index in self._held.pop(request_id, ()):
            heapq.heappush(self._ready, index)

    def _next_index(self) -> int | None:
        while self._cursor < len(self._requests):
            if self._ready and self._ready[0] < self._cursor:
                break
            index = self._cursor
            self._cursor += 1
            prev = self._after.get(self._requests[index].request_id)
            if prev is None or prev in self._finished:
                return index
            self._held.setdefault(prev, []).append(index)
        return heapq.heappop(self._ready) if self._ready else None
