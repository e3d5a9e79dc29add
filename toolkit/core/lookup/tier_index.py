"""The lookup's view of the CPU tier: cached keys, plus the keys of stores in flight for miss attribution."""

from __future__ import annotations

from toolkit.core.lookup.result import KeyStatus
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey


class TierKeyIndex:
    """The lookup's view of the CPU tier: the pool, plus in-flight keys for miss attribution."""

    def __init__(self, cpu: CpuBlockPool, in_flight: InFlightStores) -> None:
        self.lookup = cpu.lookup
        # Lookups probe membership with `in` on these containers directly (one dict probe, no method call);
        # `key_status` below is the same decision.
        self.key_container = cpu.key_container
        self.in_flight_key_container = in_flight.keys
        self.evicted_key_container = cpu.evicted_key_container
        self._cpu, self._in_flight = cpu, in_flight

    def key_status(self, key: BlockKey) -> KeyStatus:
        if key in self.key_container:
            return KeyStatus.CACHED
        if key in self._in_flight.keys:
            return KeyStatus.IN_FLIGHT
        return KeyStatus.EVICTED if self._cpu.was_evicted(key) else KeyStatus.NEVER_STORED
