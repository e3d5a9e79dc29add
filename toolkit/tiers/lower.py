"""What the connector's worker needs of a tier below host memory: the contract, written once.

The disk tier (`toolkit.tiers.disk.DiskTier`) implements it, the shared store across engines
(`toolkit.tiers.shared.SharedTier`) too, and so does the disk with the store below it (`toolkit.tiers.cascade`); the
worker's mover (`toolkit.vllm.disk_worker`) moves blocks to and from any of them unchanged. Every call returns at once:

- `submit_write(pool, key, payload)` / `submit_read(pool, key, dest)`: a ticket, or a `Refused` reason now (busy:
  try again after a poll; miss; full; present). The payload (a write) and dest (a read) stay untouched by the
  caller until the ticket's completion is polled.
- `poll()`: the completions ready now; a read's dest holds the block only when `ok` (verified).
- `discard(pool, key)`: forget a ready key (its owner, the scheduler's index, let it go).
- `held_keys(pool)`: the keys held ready, least recently used first (what survived a restart, at open).
- `close()`: finish what is in flight and persist what must survive.
"""

from __future__ import annotations

from typing import Any, Protocol

from toolkit.tiers.disk.store import Completion, Refused


class LowerTier(Protocol):
    def submit_write(self, pool: str, key: bytes, payload: Any) -> int | Refused: ...

    def submit_read(self, pool: str, key: bytes, dest: Any) -> int | Refused: ...

    def poll(self, timeout_s: float = 0.0, at_least: int = 1) -> list[Completion]: ...

    def discard(self, pool: str, key: bytes) -> bool: ...

    def held_keys(self, pool: str) -> list[bytes]: ...

    @property
    def in_flight(self) -> int: ...

    def close(self) -> None: ...
