"""One pool's index: which slot holds which key, LRU order, and the slots busy with I/O.

Only the caller's thread touches it (the I/O threads see a slot number and buffers, never the index). A slot is
free, being written (reserved, not readable, not evictable), or ready (in the LRU, readable); a ready slot with a
read in flight is pinned and never chosen for eviction, so a load cannot have its slot overwritten under it.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass

from toolkit.tiers.disk.commit_log import Op, Record


@dataclass(frozen=True, slots=True)
class Reservation:
    slot: int
    evicted_key: bytes | None


class PoolIndex:
    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._lru: OrderedDict[bytes, int] = OrderedDict()  # ready key -> slot, oldest first
        self._seq = [0] * num_slots  # sequence number of the slot's last commit
        self._checksum = [0] * num_slots
        self._writing: dict[bytes, int] = {}  # key -> reserved slot
        self._pins: Counter[int] = Counter()
        self._free = list(range(num_slots - 1, -1, -1))  # a stack: low slots first

    def __len__(self) -> int:
        return len(self._lru)

    def slot_of(self, key: bytes) -> int | None:
        return self._lru.get(key)

    def has(self, key: bytes) -> bool:
        return key in self._lru or key in self._writing

    def touch(self, key: bytes) -> None:
        self._lru.move_to_end(key)

    def reserve(self, key: bytes) -> Reservation | None:
        """A slot for a new write of `key`: a free one, else the least recently used unpinned one (evicted)."""
        if self._free:
            slot = self._free.pop()
            self._writing[key] = slot
            return Reservation(slot, None)
        for victim, slot in self._lru.items():
            if not self._pins[slot]:
                del self._lru[victim]
                self._writing[key] = slot
                return Reservation(slot, victim)
        return None

    def commit(self, key: bytes, slot: int, seq: int, checksum: int) -> None:
        self._writing.pop(key, None)
        self._lru[key] = slot
        self._seq[slot] = seq
        self._checksum[slot] = checksum

    def abort(self, key: bytes) -> None:
        slot = self._writing.pop(key)
        self._free.append(slot)

    def drop(self, key: bytes) -> int | None:
        slot = self._lru.pop(key, None)
        if slot is not None:
            self._free.append(slot)
        return slot

    def pin(self, slot: int) -> None:
        self._pins[slot] += 1

    def unpin(self, slot: int) -> None:
        self._pins[slot] -= 1
        if not self._pins[slot]:
            del self._pins[slot]

    def is_pinned(self, slot: int) -> bool:
        return bool(self._pins.get(slot))

    def seq_of(self, slot: int) -> int:
        return self._seq[slot]

    def records(self, pool: int) -> list[Record]:
        """The ready slots as COMMIT records, oldest first (a snapshot keeps the LRU order)."""
        return [Record(Op.COMMIT, pool, s, self._seq[s], self._checksum[s], k) for k, s in self._lru.items()]

    def restore(self, records: list[Record]) -> int:
        """Rebuild from replayed records (this pool's, in file order); returns the number of ready keys."""
        holder: dict[int, bytes] = {}  # slot -> key, the newest record per slot
        for r in records:
            if r.slot >= self.num_slots or r.seq < self._seq[r.slot]:
                continue
            old = holder.pop(r.slot, None)
            if old is not None and self._lru.get(old) == r.slot:
                del self._lru[old]
            self._seq[r.slot] = r.seq
            if r.op is Op.DROP:
                continue
            previous = self._lru.get(r.key)
            if previous is not None and self._seq[previous] > r.seq:
                continue  # the key has a newer copy elsewhere
            if previous is not None:
                holder.pop(previous, None)
            holder[r.slot] = r.key
            self._checksum[r.slot] = r.checksum
            self._lru.pop(r.key, None)
            self._lru[r.key] = r.slot  # most recent last
        used = set(self._lru.values())
        self._free = [s for s in range(self.num_slots - 1, -1, -1) if s not in used]
        return len(self._lru)
