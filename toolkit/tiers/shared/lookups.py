"""Asking the store which blocks it holds without blocking the caller: the scheduler side's lookup.

vLLM's scheduler may answer "not known yet" for a request's external hit and ask again next step, so a lookup is a
ticket: `submit_lookup` hands one batched existence query to a store thread, `lookup_result(ticket)` is None while
it runs and a tuple of booleans once answered, or all False past `op_timeout_s` (counted: a store that does not
answer means no hit, never a stalled step). A True is a hint: the value is verified only when read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolkit.tiers.shared.backend import StoreClient
from toolkit.tiers.shared.workers import Staging

MAX_LOOKUP_KEYS = 4096


@dataclass(slots=True)
class _Lookup:
    size: int
    deadline: float
    answered: threading.Event = field(default_factory=threading.Event)
    answer: list[int] = field(default_factory=list)


class Lookups:
    def __init__(self) -> None:
        self._pending: dict[int, _Lookup] = {}
        self.unanswered = 0  # lookups past their deadline: answered all False

    def add(
        self, ticket: int, client: StoreClient, store_keys: list[str], timeout_s: float
    ) -> Callable[[Staging], Any]:
        """Track `ticket` and return the job that answers it on a store thread."""
        lookup = _Lookup(len(store_keys), time.monotonic() + timeout_s)
        self._pending[ticket] = lookup

        def job(staging: Staging) -> Any:
            lookup.answer.extend(client.exists(store_keys))
            lookup.answered.set()
            return None

        return job

    def wait(self, ticket: int, timeout_s: float) -> None:
        lookup = self._pending.get(ticket)
        if lookup is not None:
            lookup.answered.wait(timeout_s)

    def result(self, ticket: int) -> tuple[bool, ...] | None:
        """None while the store has not answered and the deadline has not passed; then the answer, once."""
        lookup = self._pending.get(ticket)
        if lookup is None:
            raise KeyError(f"shared tier: no lookup {ticket} in flight (already answered?)")
        if lookup.answered.is_set() and len(lookup.answer) == lookup.size:
            del self._pending[ticket]
            return tuple(v == 1 for v in lookup.answer)  # negative: the store could not tell, so no hit
        if time.monotonic() < lookup.deadline:
            return None
        del self._pending[ticket]
        self.unanswered += 1
        return (False,) * lookup.size
