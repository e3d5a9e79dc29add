"""The shared store (Mooncake Store) as the connector sees it: the tier below the CPU tier, or below the disk.

The worker moves blocks with the disk tier's mover (`DiskMover` over a `SharedTier`, or over a `CascadeTier` of the
disk and the store: one pool, one CPU-tier block a value). The scheduler side cannot list what *other* engines wrote, so it asks: on a request's first lookup, the
keys past what its CPU tier and its index of the store already know go to the store in one batched existence query
(`submit_lookup`); the request answers "ask again" (vLLM keeps it waiting, with nothing allocated) until the store
answers or the tier's deadline (`op_timeout_s`) passes, which is a miss (counted). The keys the store holds join the
scheduler's index of the lower tier (`DiskIndex.learn`), so the lookup that follows promotes them exactly as disk
hits: read into fresh CPU blocks, then loaded. A True is a hint; the worker verifies every value it reads (a value
that vanished or does not verify fails its read: recomputed). One query per request: a request asked once is not
asked again (a long-waiting request does not query every step).

The store evicts by itself (Mooncake evicts about 5% of its objects past a 90% high watermark, whatever any engine's
index says), so the index is audited (`audit`, from the lookups, at most every `AUDIT_EVERY_S`): one batched
existence query of the keys the index held already at the previous audit (a write still in flight is not yet in
the store), and the ones the store no longer holds are dropped (`DiskIndex.forget`, counted `audit_dropped`), so
the held count and the lookups track the store, not what was once written. Writes the store refused never enter
it: the worker reports them and the scheduler side drops them at once (`tier_counts.LowerTierBook`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable, Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex, disk_key
from toolkit.core.pool.keys import BlockKey
from toolkit.tiers.disk import CacheIdentity
from toolkit.tiers.shared import SharedPool, SharedTier, SharedTierConfig
from toolkit.tiers.shared.lookups import MAX_LOOKUP_KEYS
from toolkit.vllm.config import ConnectorConfig
from toolkit.vllm.disk_store import POOL

if TYPE_CHECKING:  # vLLM's types (Any to mypy: vLLM is not analysed)
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

LOOKUP_TIMEOUT_S = 2.0  # a store that does not answer a lookup by then: no hit (the request stops waiting)
AUDIT_EVERY_S = 5.0  # how often the index is checked against what the store still holds


def connect_tier(
    master: str, identity: CacheIdentity, payload_bytes: int, *, queue_depth: int = 4, max_in_flight: int = 0
) -> SharedTier:
    """A client of the store whose master listens at `master` (`host:port`), one pool of CPU-tier blocks; never
    raises for a store that is down (it refuses everything and reconnects by itself)."""
    config = SharedTierConfig(
        master=master,
        identity=identity,
        pools=(SharedPool(POOL, payload_bytes),),
        queue_depth=queue_depth,
        max_in_flight=max_in_flight,
        op_timeout_s=LOOKUP_TIMEOUT_S,
    )
    return SharedTier.connect(config)


@dataclass(slots=True)
class StoreLookupCounts:
    lookups: int = 0  # batched queries sent (one per request at most)
    keys_asked: int = 0
    keys_found: int = 0  # keys the store held, learnt into the index
    lookups_refused: int = 0  # the store refused the query (down, paused or busy): no hit
    lookups_waited: int = 0  # lookups answered "ask again" while a query ran (idle steps spin: many per ms)
    answer_us_total: int = 0  # submit to answer (or deadline), summed over queries, microseconds
    answer_us_max: int = 0
    audits: int = 0  # audits answered
    audit_dropped: int = 0  # index slots the store no longer held (it evicted them)

    def as_counters(self) -> dict[str, int]:
        return {f"shared_{name}": getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class _Query:
    ticket: int
    keys: tuple[BlockKey, ...]
    asked_at_s: float  # time.monotonic()


class StoreLookups:
    """The scheduler side's existence queries to the shared store, one per request, never blocking a step."""

    def __init__(self, tier: SharedTier, num_groups: int, hash_tokens: int, *, audit_learnt_only: bool = False) -> None:
        self._tier = tier
        # Below a disk, the index also holds what this engine's disk holds (restored at start, demoted since), which
        # the store's evictions do not take away: only keys learnt from the store are audited then.
        self._learnt: set[BlockKey] | None = set() if audit_learnt_only else None
        self._groups = range(num_groups)
        self._hash_tokens = hash_tokens
        self._asked: dict[str, _Query | None] = {}  # request -> its query in flight, or None once answered
        self._abandoned: list[int] = []  # tickets of requests that finished before their answer
        self.counts = StoreLookupCounts()
        self._audit: _Query | None = None  # the audit in flight
        self._audit_due_s = 0.0
        self._audit_seen: set[BlockKey] = set()  # the index's keys at the previous audit

    def waiting(
        self, request_id: str, block_hashes: Sequence[Hashable], local_tokens: int, cpu: CpuBlockPool, index: DiskIndex
    ) -> bool:
        """Whether the request's lookup must wait for the store (answer "ask again"); once it has answered, the
        keys it holds are in `index` and the caller looks up as usual."""
        self._tier.poll()  # retires answered queries from the tier's in-flight bound (else it refuses as busy)
        self._drain_abandoned()
        if self._audit is not None or time.monotonic() >= self._audit_due_s:
            self.audit(index)
        if request_id in self._asked:
            query = self._asked[request_id]
            if query is None:
                return False
            answer = self._tier.lookup_result(query.ticket)
            if answer is None:
                self.counts.lookups_waited += 1
                return True
            self._asked[request_id] = None
            answer_us = int((time.monotonic() - query.asked_at_s) * 1e6)
            self.counts.answer_us_total += answer_us
            self.counts.answer_us_max = max(self.counts.answer_us_max, answer_us)
            found = [key for key, held in zip(query.keys, answer) if held]
            self.counts.keys_found += index.learn(found)
            if self._learnt is not None:
                self._learnt.update(found)
            return False
        self._asked[request_id] = None
        keys = self._unknown_keys(block_hashes, local_tokens, cpu, index)
        if not keys:
            return False
        ticket = self._tier.submit_lookup(POOL, [name for _, name in keys])
        if not isinstance(ticket, int):  # a Refused reason: the store is down, paused or busy: no hit
            self.counts.lookups_refused += 1
            return False
        self._asked[request_id] = _Query(ticket, tuple(key for key, _ in keys), time.monotonic())
        self.counts.lookups += 1
        self.counts.keys_asked += len(keys)
        self.counts.lookups_waited += 1
        return True

    def _unknown_keys(
        self, block_hashes: Sequence[Hashable], local_tokens: int, cpu: CpuBlockPool, index: DiskIndex
    ) -> list[tuple[BlockKey, bytes]]:
        """Every group's key at every hash boundary past the local prefix that neither the CPU tier nor the index
        knows (a superset of what the hybrid lookup probes: the store answers False for the rest), at most
        `MAX_LOOKUP_KEYS`, nearest first. Holes count: a key the local tiers dropped (a disk above the store evicts
        its least recently used blocks, which may sit in the middle of a prefix) may be the one the hit needs."""
        in_cpu, in_index = cpu.key_container, index.key_container
        out: list[tuple[BlockKey, bytes]] = []
        for block_hash in block_hashes[local_tokens // self._hash_tokens :]:
            for group_id in self._groups:
                key = BlockKey(group_id, block_hash)
                if key in in_cpu or key in in_index:
                    continue
                name = disk_key(key)
                if name is not None:
                    out.append((key, name))
                    if len(out) == MAX_LOOKUP_KEYS:
                        return out
        return out

    def audit(self, index: DiskIndex, *, every_key: bool = False) -> bool:
        """Take the answer of the audit in flight, if any, dropping from `index` what the store no longer holds;
        else start one when due (`every_key`: now, and every key, not only those held at the previous audit).
        Never blocks; True while an audit is in flight."""
        if self._audit is not None:
            answer = self._tier.lookup_result(self._audit.ticket)
            if answer is None:
                return True
            gone = [disk_key(key) for key, held in zip(self._audit.keys, answer) if not held]
            self.counts.audit_dropped += index.forget(name for name in gone if name is not None)
            self.counts.audits += 1
            self._audit = None
            if not every_key:
                return False
        if not every_key and time.monotonic() < self._audit_due_s:
            return False
        self._audit_due_s = time.monotonic() + AUDIT_EVERY_S
        held = index.primary_keys()
        if self._learnt is not None:
            self._learnt.intersection_update(held)  # what the index dropped is no longer ours to audit
            held = [key for key in held if key in self._learnt]
        keys = held if every_key else [key for key in held if key in self._audit_seen]
        self._audit_seen = set(held)
        named = [(key, name) for key in keys[-MAX_LOOKUP_KEYS:] if (name := disk_key(key)) is not None]
        if not named:
            return False
        ticket = self._tier.submit_lookup(POOL, [name for _, name in named])
        if not isinstance(ticket, int):  # the store is down or busy: audited next time
            return False
        self._audit = _Query(ticket, tuple(key for key, _ in named), time.monotonic())
        return True

    def forget(self, request_id: str) -> None:
        """The request finished: its answer, if still coming, is taken and dropped later."""
        query = self._asked.pop(request_id, None)
        if query is not None:
            self._abandoned.append(query.ticket)

    def _drain_abandoned(self) -> None:
        if self._abandoned:
            self._abandoned = [t for t in self._abandoned if self._tier.lookup_result(t) is None]

    def close(self) -> None:
        self._tier.close()


def scheduler_lookups(
    vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, config: ConnectorConfig, geometry: HybridGeometry
) -> StoreLookups | None:
    """The scheduler side's queries (its own client: lookups only, rank 0's identity, as the disk tier's restart
    read), or None without `shared_store_url`."""
    if not config.shared_store_master:
        return None
    from toolkit.vllm.disk_store import cache_identity, row_layout_bytes
    from toolkit.vllm.version import check_supported

    identity = cache_identity(vllm_config, kv_cache_config, rank=0, vllm_version=check_supported()[1])
    # One thread; a burst of new requests queues its queries (each waits its turn up to the deadline) rather than
    # being refused as busy past the default bound of 4 (a refused query is a request with no store hit).
    tier = connect_tier(
        config.shared_store_master, identity, row_layout_bytes(kv_cache_config), queue_depth=1, max_in_flight=64
    )
    return StoreLookups(
        tier,
        num_groups=len(geometry.groups),
        hash_tokens=geometry.hash_tokens,
        audit_learnt_only=bool(config.disk_path),
    )
