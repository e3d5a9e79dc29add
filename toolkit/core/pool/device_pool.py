"""What the offload manager needs from the engine's device (GPU) block pool, and a faithful model of it.

`DevicePool` is the whole contract. vLLM's `BlockPool` is adapted to it in `toolkit/vllm/`; `DeviceBlockPoolModel`
implements it in pure Python for tests, notebooks and benchmarks, with vLLM's semantics (docs/reference-behaviour.md,
"Block pool"): null block 0, ref counts, an LRU free queue of unpinned blocks that keep their keys until reallocated,
primary and alias keys per block.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Protocol, Sequence, runtime_checkable

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.group_tags import NO_GROUP
from toolkit.core.pool.keys import BlockKey


@runtime_checkable
class DevicePool(Protocol):
    """The device block pool as the manager sees it. All methods are O(1) per block except the free-queue walk.

    - `null_block_id`: the id of the placeholder block (vLLM: 0); never copied.
    - `primary_key(block_id)`: the block's own key (group-tagged, its last hash boundary) or None if not hashed.
    - `alias_keys(block_id)`: interior boundary keys registered on the block (fine-grained partial tails).
    - `ref_count(block_id)`: how many users hold the block; 0 means it sits in the free queue.
    - `touch(block_ids)` / `free(block_ids)`: add / drop one ref each; the manager pins a block while a copy reads
      or writes it, so the engine cannot reallocate it under the copy.
    - `iter_free_queue(after_block_id)`: free blocks in eviction order (next victim first), starting after the
      given free block, or at the head for None. The manager reads a bounded prefix of it (lazy stores).
    - `find_cached_block(key)`: a device block still holding `key`, or None (recovers sliding-window blocks that
      left the request's table but are still cached).
    """

    @property
    def null_block_id(self) -> int: ...

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can be given: all but the null block (what parked loads may hold, `load/parking.py`)."""
        ...

    def primary_key(self, block_id: int) -> BlockKey | None: ...

    def alias_keys(self, block_id: int) -> tuple[BlockKey, ...]: ...

    def ref_count(self, block_id: int) -> int: ...

    def touch(self, block_ids: Sequence[int]) -> None: ...

    def free(self, block_ids: Sequence[int]) -> None: ...

    def iter_free_queue(self, after_block_id: int | None = None) -> Iterator[int]: ...

    def find_cached_block(self, key: BlockKey) -> int | None: ...


class DeviceBlockPoolModel:
    """A pure-Python model of vLLM's device `BlockPool` implementing `DevicePool`, plus the engine-side verbs tests
    need (`allocate`, `cache_block`, `add_alias`)."""

    def __init__(self, num_blocks: int) -> None:
        # The CPU pool with exact LRU is the same data structure as vLLM's device pool; reuse it.
        self._pool = CpuBlockPool(num_blocks, policy="lru", num_remembered_evictions=0, record_events=False)

    # ----- DevicePool ----------------------------------------------------------------------------------------

    @property
    def null_block_id(self) -> int:
        return self._pool.null_block_id

    @property
    def usable_blocks(self) -> int:
        return self._pool.num_blocks - 1

    def primary_key(self, block_id: int) -> BlockKey | None:
        return self._pool.primary_key(block_id)

    def alias_keys(self, block_id: int) -> tuple[BlockKey, ...]:
        return self._pool.alias_keys(block_id)

    def ref_count(self, block_id: int) -> int:
        return self._pool.ref_count(block_id)

    def touch(self, block_ids: Iterable[int]) -> None:
        self._pool.touch(block_ids)

    def free(self, block_ids: Iterable[int]) -> None:
        self._pool.free(block_ids)

    def iter_free_queue(self, after_block_id: int | None = None) -> Iterator[int]:
        return self._pool.iter_free(after_block_id)

    def find_cached_block(self, key: BlockKey) -> int | None:
        return self._pool.lookup(key)

    # ----- engine side ---------------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return self._pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self._pool.num_free_blocks

    def allocate(self, num_blocks: int) -> list[int]:
        """Take `num_blocks` blocks from the free-queue head (evicting their keys), each with ref count 1."""
        return self._pool.allocate([NO_GROUP] * num_blocks)

    def cache_block(self, block_id: int, key: BlockKey, aliases: Iterable[BlockKey] = ()) -> None:
        """Hash a block (the engine's prefix caching after its tokens are computed)."""
        self._pool.cache(block_id, key, aliases)

    def add_alias(self, block_id: int, key: BlockKey) -> None:
        """Register an interior boundary on a block (vLLM `cache_partial_block`)."""
        self._pool.cache(block_id, None, (key,))
