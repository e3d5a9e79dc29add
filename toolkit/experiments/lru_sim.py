"""The LRU-sim: a CPU tier of `capacity` prefix keys with least-recently-used eviction, run over the whole run.

Not a bound: what an LRU tier of the modelled size would serve, drawn next to the Belady bound (`belady.py`), which
it never exceeds (Belady is the optimum over every policy of a tier at least this size). A chain is touched tail
first, so tails go first.
"""

from __future__ import annotations

import numpy as np

from toolkit.experiments.prefix_keys import DenseRequests, leading, max_hit_keys

LRU_BLOCK = 4096  # touch times per counted block: finding the capacity-th latest touch scans blocks, then one


def lru_hits(requests: DenseRequests, num_ids: int, unit: int, capacity: int) -> list[int]:
    """An LRU tier of `capacity` keys (every key offered is stored; a chain touched tail first, so tails go first).

    Such a tier holds exactly the `capacity` most recently touched keys, so instead of moving keys in a list it
    stamps each key's last touch: a key is held while its stamp is among the `capacity` latest live stamps.
    """
    if not capacity:
        return [0] * len(requests)
    last = np.full(num_ids, -1, dtype=np.int64)  # each key's latest touch time, -1 before its first
    live = np.zeros(sum(len(keys) for keys, _ in requests) + 1, dtype=bool)  # a key's latest touch is at this time
    per_block = np.zeros(len(live) // LRU_BLOCK + 1, dtype=np.int64)  # live stamps per block of times
    hits, now, touched = [], 0, 0
    for keys, prompt_len in requests:
        cutoff = 0 if touched <= capacity else _nth_latest(live, per_block, capacity)
        hits.append(leading(last[keys[: max_hit_keys(prompt_len, unit)]] >= cutoff) * unit)
        before = last[keys]
        before = before[before >= 0]
        touched += len(keys) - len(before)
        live[before] = False
        per_block -= np.bincount(before // LRU_BLOCK, minlength=len(per_block))
        last[keys] = np.arange(now + len(keys) - 1, now - 1, -1)  # the head of the chain ends most recent
        live[now : now + len(keys)] = True
        per_block += np.bincount(np.arange(now, now + len(keys)) // LRU_BLOCK, minlength=len(per_block))
        now += len(keys)
    return hits


def _nth_latest(live: np.ndarray, per_block: np.ndarray, n: int) -> int:
    """The time of the `n`-th latest live stamp (there are at least `n`)."""
    from_end = np.cumsum(per_block[::-1])
    back = int(np.searchsorted(from_end, n))
    block = len(per_block) - 1 - back
    rest = n - (int(from_end[back - 1]) if back else 0)
    stamps = np.flatnonzero(live[block * LRU_BLOCK : (block + 1) * LRU_BLOCK])
    return block * LRU_BLOCK + int(stamps[len(stamps) - rest])
