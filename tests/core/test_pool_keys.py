"""The CPU pool's key bookkeeping (one add, one removal) against a plain model: per key the blocks holding it in
insertion order, per block its primary and aliases, and the bounded memory of evicted keys."""

from __future__ import annotations

import random
from collections import OrderedDict

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.keys import BlockKey


class _Model:
    def __init__(self, num_blocks: int, remembered: int) -> None:
        self.primary: list = [None] * num_blocks
        self.aliases: list[list] = [[] for _ in range(num_blocks)]
        self.holders: dict = {}
        self.evicted: OrderedDict = OrderedDict()
        self.remembered = remembered
        self.events: list[tuple] = []

    def add(self, block_id: int, key) -> None:
        if key == self.primary[block_id] or key in self.aliases[block_id]:
            return
        if self.primary[block_id] is None:
            self.primary[block_id] = key
        else:
            self.aliases[block_id].append(key)
        holders = self.holders.setdefault(key, [])
        if block_id not in holders:
            holders.append(block_id)
        self.evicted.pop(key, None)

    def remove(self, block_id: int, kind: str | None, group_id: int) -> tuple:
        keys = ((self.primary[block_id],) if self.primary[block_id] is not None else ()) + tuple(self.aliases[block_id])
        for key in keys:
            self.holders[key].remove(block_id)
            if not self.holders[key]:
                del self.holders[key]
                if self.remembered:
                    self.evicted.pop(key, None)
                    self.evicted[key] = None
                    while len(self.evicted) > self.remembered:
                        self.evicted.popitem(last=False)
        self.primary[block_id], self.aliases[block_id] = None, []
        if keys and kind is not None:
            self.events.append((kind, block_id, group_id, keys))
        return keys


def test_pool_keys_follow_the_plain_model():
    rng = random.Random(29)
    for _trial in range(60):
        num_blocks, remembered = rng.randrange(3, 12), rng.choice([0, 2, 5])
        pool = CpuBlockPool(
            num_blocks, num_remembered_evictions=remembered, record_events=True, policy=rng.choice(["lru", "slru"])
        )
        model = _Model(num_blocks, remembered)
        pinned: list[int] = []
        group_of = [-1] * num_blocks
        for _ in range(120):
            op = rng.random()
            if op < 0.35 and len(pool.policy):  # allocate: the policy's victims lose their keys first
                count = rng.randrange(1, len(pool.policy) + 1)
                victims = pool.policy.eviction_order()[:count]
                for block_id in victims:
                    model.remove(block_id, "evicted", group_of[block_id])
                groups = [rng.randrange(2) for _ in range(count)]
                assert pool.allocate(groups) == victims
                for block_id, group_id in zip(victims, groups):
                    group_of[block_id] = group_id
                pinned += victims
            elif op < 0.6 and pinned:  # cache keys on a pinned block (several blocks may share a key)
                block_id = rng.choice(pinned)
                primary = rng.choice([None, BlockKey(0, rng.randrange(6))])
                aliases = tuple(BlockKey(1, rng.randrange(6)) for _ in range(rng.choice([0, 0, 1, 2])))
                pool.cache(block_id, primary, aliases)
                for key in ((primary,) if primary is not None else ()) + aliases:
                    model.add(block_id, key)
            elif op < 0.7 and pinned:  # a failed copy drops a block's keys
                block_id = rng.choice(pinned)
                assert pool.drop_keys(block_id) == model.remove(block_id, "dropped", group_of[block_id])
            elif op < 0.95 and pinned:
                block_id = pinned.pop(rng.randrange(len(pinned)))
                pool.free([block_id])
            elif not pinned:
                assert pool.reset()
                for block_id in range(1, num_blocks):
                    model.remove(block_id, None, group_of[block_id])
                model.holders.clear()
                model.evicted.clear()
                model.events.append(("cleared", -1, -1, ()))
            events = [(e.kind, e.block_id, e.group_id, e.keys) for e in pool.take_events()]
            assert events == model.events
            model.events = []
            assert [pool.primary_key(b) for b in range(num_blocks)] == model.primary
            assert [list(pool.alias_keys(b)) for b in range(num_blocks)] == model.aliases
            assert set(pool.key_container) == set(model.holders)
            assert all(pool.lookup(key) == holders[0] for key, holders in model.holders.items())
            assert list(pool.evicted_key_container) == list(model.evicted)
            assert not set(pool.evicted_key_container) & set(pool.key_container)  # a held key is not "evicted"
