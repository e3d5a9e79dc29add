"""The scheduler side's index of a disk tier below the CPU pool: which keys a disk slot holds, in LRU order.

Write-back on eviction: a block the CPU pool evicts is *demoted* here (`demote`, called by the pool's eviction
hook): its keys take a slot, written once; a block whose primary key is already on disk is clean (its bytes are
there: a key's KV never changes), so nothing is written and the slot only moves to the most-recently-used end.
The index is inclusive: a slot promoted back into the CPU pool (`promote`, a disk read) keeps its keys, so that
block's next eviction writes nothing. When full, the least recently used slot is dropped with all its keys.

Pure bookkeeping, in blocks: no bytes move here (the dry engine models the time; the connector's worker moves them,
told by the cascade's per-step `DiskBatch`). `disk_key` names a block on disk by its primary key, persistently: a
restarted engine finds the same names for the same tokens (`restore`), given vLLM's hash seed is fixed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Container, Iterable, Sequence

from toolkit.core.pool.keys import BlockKey

MAX_DISK_KEY_BYTES = 64  # the disk store's key limit (`toolkit.tiers.disk.layout.MAX_KEY_BYTES`)


def disk_key(key: BlockKey) -> bytes | None:
    """The bytes a disk tier stores `key` under: a type tag, the group id (2 bytes), the hash; None for a hash of
    another type or too long (that block is never written: a future miss, never a wrong hit)."""
    block_hash = key.block_hash
    if not 0 <= key.group_id < 1 << 16:
        return None
    if isinstance(block_hash, bytes):
        tag, body = b"b", block_hash
    elif isinstance(block_hash, str):
        tag, body = b"s", block_hash.encode()
    elif type(block_hash) is int and -(1 << 127) <= block_hash < 1 << 127:
        tag, body = b"i", block_hash.to_bytes(16, "big", signed=True)
    else:
        return None
    out = tag + key.group_id.to_bytes(2, "big") + body
    return out if body and len(out) <= MAX_DISK_KEY_BYTES else None


def block_key_of(data: bytes) -> BlockKey | None:
    """`disk_key`'s inverse; None for bytes it never made (a store from elsewhere is not trusted to parse)."""
    if len(data) < 4 or data[:1] not in (b"b", b"s", b"i"):
        return None
    group_id, body = int.from_bytes(data[1:3], "big"), data[3:]
    if data[:1] == b"b":
        return BlockKey(group_id, body)
    if data[:1] == b"s":
        try:
            return BlockKey(group_id, body.decode())
        except UnicodeDecodeError:
            return None
    return BlockKey(group_id, int.from_bytes(body, "big", signed=True)) if len(body) == 16 else None


@dataclass(slots=True)
class DiskCounts:
    """What the disk tier did, in blocks (times the block's bytes: the bytes written and read)."""

    blocks_written: int = 0  # demotions that took a new slot (write-back)
    blocks_clean: int = 0  # demotions of a block already on disk: nothing written
    blocks_read: int = 0  # slots promoted into the CPU pool (disk reads)
    blocks_dropped: int = 0  # slots the disk's own LRU evicted

    def write_amplification(self) -> float | None:
        """Blocks written per block later read (None before any read)."""
        return self.blocks_written / self.blocks_read if self.blocks_read else None


class DiskIndex:
    """`num_blocks` slots of one CPU block each; LRU over slots."""

    def __init__(self, num_blocks: int) -> None:
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise ValueError(f"num_blocks: must be an integer >= 1, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self._slots: OrderedDict[int, list[BlockKey]] = OrderedDict()  # slot -> its keys, least recent first
        self._key_to_slot: dict[BlockKey, int] = {}
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self.counts = DiskCounts()
        self.dropped_keys: list[BlockKey] = []  # primary keys of slots the LRU let go, until the cascade takes them

    # ----- queries -----------------------------------------------------------------------------------------

    @property
    def key_container(self) -> Container[object]:
        """`key in index.key_container`: whether a key is on disk (plain `(group_id, hash)` tuples probe too)."""
        return self._key_to_slot

    def __contains__(self, key: object) -> bool:
        return key in self._key_to_slot

    def __len__(self) -> int:
        """Slots in use."""
        return len(self._slots)

    def slot_of(self, key: BlockKey) -> int | None:
        return self._key_to_slot.get(key)

    def keys_of(self, slot: int) -> tuple[BlockKey, ...]:
        return tuple(self._slots.get(slot, ()))

    def primary_keys(self) -> list[BlockKey]:
        """Each slot's primary key (the name its bytes are stored under), least recently used first."""
        return [keys[0] for keys in self._slots.values()]

    # ----- changes -----------------------------------------------------------------------------------------

    def demote(self, keys: Sequence[BlockKey]) -> bool:
        """A block the CPU pool evicts, with its keys (primary first): True when it is written to a new slot."""
        if not keys:
            return False
        key_to_slot, slots = self._key_to_slot, self._slots
        slot = key_to_slot.get(keys[0])
        if slot is not None:  # clean: the block's bytes are on disk already; keep any new alias with them
            held = slots[slot]
            for key in keys[1:]:
                if key not in key_to_slot:
                    key_to_slot[key] = slot
                    held.append(key)
            slots.move_to_end(slot)
            self.counts.blocks_clean += 1
            return False
        if not self._free:
            self._drop_lru()
        slot = self._free.pop()
        held = []
        for key in keys:
            if key not in key_to_slot:  # an alias another slot holds stays with that slot
                key_to_slot[key] = slot
                held.append(key)
        slots[slot] = held
        self.counts.blocks_written += 1
        return True

    def touch(self, slots: Sequence[int]) -> None:
        """Move slots to the most-recently-used end (a hit on them, before anything else is demoted)."""
        held = self._slots
        for slot in slots:
            if slot in held:
                held.move_to_end(slot)

    def promote(self, slot: int) -> tuple[BlockKey, ...]:
        """A slot read back into the CPU pool (counted); it keeps its keys (inclusive). Its keys, primary first."""
        keys = self._slots.get(slot)
        if keys is None:
            return ()
        self._slots.move_to_end(slot)
        self.counts.blocks_read += 1
        return tuple(keys)

    def drop(self, keys: Sequence[BlockKey]) -> None:
        """Forget the slots holding these keys (their data is suspect)."""
        for key in keys:
            slot = self._key_to_slot.get(key)
            if slot is not None:
                self._release(slot)

    def forget(self, names: Iterable[bytes]) -> int:
        """Slots whose write the lower tier did not keep (refused: full, down; failed), named by their `disk_key`:
        dropped, so the index never advertises them as held; returns how many slots went."""
        held = len(self._slots)
        self.drop([key for key in map(block_key_of, names) if key is not None])
        return held - len(self._slots)

    def restore(self, keys: Sequence[BlockKey]) -> int:
        """Keys a disk store already holds (a restart), least recently used first, one slot each; returns how many
        were taken (the most recent ones when they outnumber the slots)."""
        taken = 0
        for key in keys[-self.num_blocks :] if len(keys) > self.num_blocks else keys:
            if key in self._key_to_slot or not self._free:
                continue
            slot = self._free.pop()
            self._key_to_slot[key] = slot
            self._slots[slot] = [key]
            taken += 1
        return taken

    def learn(self, keys: Sequence[BlockKey]) -> int:
        """Keys a lower tier holds that this index did not know (another engine wrote them to a shared store), one
        slot each, made room for by dropping the least recently used slots; returns how many were taken."""
        new = [key for key in dict.fromkeys(keys) if key not in self._key_to_slot][-self.num_blocks :]
        for _ in range(len(new) - len(self._free)):
            self._drop_lru()
        return self.restore(new)

    def clear(self) -> None:
        self._slots.clear()
        self._key_to_slot.clear()
        self._free = list(range(self.num_blocks - 1, -1, -1))

    def _drop_lru(self) -> None:
        slot = next(iter(self._slots))
        self.dropped_keys.append(self._slots[slot][0])
        self._release(slot)
        self.counts.blocks_dropped += 1

    def _release(self, slot: int) -> None:
        for key in self._slots.pop(slot):
            del self._key_to_slot[key]
        self._free.append(slot)
