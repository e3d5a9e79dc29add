"""Prefix keys: what the bounds (`oracle.py`, `belady.py`, `lru_sim.py`) count hits on.

A prompt of L tokens has floor(L / unit) keys, key i naming the prefix of i * unit tokens (a hash chain, so key i
determines keys 0..i-1). A request can reuse the longest run of leading keys that a cache holds, capped so at least
one prompt token is recomputed (the engine needs one token to produce logits). The simulations run on dense integer
key ids (`KeyIds`) and numpy arrays, a request at a time, not a key at a time (a whole Mooncake trace is millions of
keys).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np


def prefix_keys(token_ids: Sequence[int], unit: int) -> list[int]:
    """Chain keys of every full `unit`-token prefix (Python's tuple hash is deterministic for ints)."""
    keys = []
    h = 0x5EED
    for start in range(0, len(token_ids) - unit + 1, unit):
        h = hash((h, tuple(token_ids[start : start + unit])))
        keys.append(h)
    return keys


def max_hit_keys(prompt_len: int, unit: int) -> int:
    return max(0, (prompt_len - 1) // unit)


class KeyIds:
    """Dense integer ids (0, 1, ...) for keys, so the simulations index arrays instead of hashing every key.

    The bounds depend only on which keys are equal, so renaming keys to ids changes no answer.
    """

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self.count = 0

    def reserve_for(self, name: Hashable, num_ids: int) -> int:
        """The first of `num_ids` consecutive ids kept for `name` (one key naming several, e.g. a block's units)."""
        first = self._ids.get(name)
        if first is None:
            first = self._ids[name] = self.count
            self.count += num_ids
        return first

    def of(self, keys: Sequence[Hashable]) -> np.ndarray:
        return np.array([self.reserve_for(key, 1) for key in keys], dtype=np.int64)


DenseRequests = Sequence[tuple[np.ndarray, int]]  # (key ids, prompt length) per request


def dense(requests: Sequence[tuple[Sequence[Hashable], int]], ids: KeyIds) -> list[tuple[np.ndarray, int]]:
    """`requests` with their keys as `ids`; a request's keys must be distinct (a chain's are)."""
    out = [(ids.of(keys), prompt_len) for keys, prompt_len in requests]
    if any(len(np.unique(keys)) != len(keys) for keys, _ in out):
        raise ValueError("keys: a request's prefix keys must be distinct (a hash chain's are)")
    return out


def leading(present: np.ndarray) -> int:
    """The length of the leading run of True: the keys a request can reuse."""
    return len(present) if present.all() else int(present.argmin())
