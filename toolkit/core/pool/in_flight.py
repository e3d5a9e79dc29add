"""Stores in flight, as the pool's readers see them: device blocks being copied to the CPU and the keys they held.

The store stage fills it (`StoreBatch.admit`) and empties it (store completion); the lookup reads its keys to tell
"in flight" from "never stored" in a miss. It lives with the pool so the lookup needs nothing from the store stage.
"""

from __future__ import annotations

from itertools import chain
from typing import Iterable, Sequence

from toolkit.core.pool.keys import BlockKey


class InFlightStores:
    """Device blocks being copied to the CPU, and the keys they held when scheduled (for dedup and attribution).

    `keys` is a set (membership is all the readers need). A key held by two in-flight blocks at once (an alias
    coinciding with another block's key: selection never takes a block whose primary is in flight) counts its
    extra holders in `_extra_holders`, so the key leaves `keys` only with its last holder. Without such keys, a
    finished event leaves in two set operations at C speed.
    """

    def __init__(self) -> None:
        self.device_ids: set[int] = set()
        self.keys: set[BlockKey] = set()
        self._extra_holders: dict[BlockKey, int] = {}

    def add(self, device_id: int, keys: Sequence[BlockKey]) -> None:
        self.device_ids.add(device_id)
        self.add_keys(keys)

    def add_keys(self, keys: Sequence[BlockKey]) -> None:
        flight_keys = self.keys
        for key in keys:
            if key in flight_keys:
                self._extra_holders[key] = self._extra_holders.get(key, 0) + 1
            else:
                flight_keys.add(key)

    def remove(self, device_id: int, keys: Sequence[BlockKey]) -> None:
        self.remove_event([device_id], [keys])

    def remove_event(self, device_ids: Iterable[int], keys_per_block: Iterable[Sequence[BlockKey]]) -> None:
        """Forget a whole store event's blocks at once: store completion runs this for every stored block."""
        self.device_ids.difference_update(device_ids)
        extra = self._extra_holders
        if not extra:
            self.keys.difference_update(chain.from_iterable(keys_per_block))
            return
        flight_keys = self.keys
        for keys in keys_per_block:
            for key in keys:
                left = extra.get(key, 0)
                if left:
                    if left > 1:
                        extra[key] = left - 1
                    else:
                        del extra[key]
                else:
                    flight_keys.discard(key)

    def clear(self) -> None:
        self.device_ids.clear()
        self.keys.clear()
        self._extra_holders.clear()
