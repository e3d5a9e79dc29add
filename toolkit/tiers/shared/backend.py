"""The store client under the shared tier: Mooncake Store's Python client (`mooncake.store`), non-CUDA build, TCP.

Only this module touches the native client. It is imported when a tier connects, never at import time, so the
toolkit works without the `shared-store` extra. Each call blocks its thread; the native calls release the GIL (the
engine's threads run on while one waits, measured), but they are unbounded in time: against a stopped master a call
waits ~30 s (its RPC timeout), a `setup` against a dead one retries for ever. The tier therefore runs every call on
its own threads with a deadline (workers.py) and never calls the client from the caller's thread.

Return codes seen from this build (docs/shared-store.md): 0 ok, -200 no space (the store is full), -600 the
destination buffer is too small (the value is larger than asked: nothing is allocated), -704 no such object,
-800 a transfer failed (the store process is gone), -900 / -901 the master is unreachable / timed out.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

NO_SPACE = -200
BUFFER_TOO_SMALL = -600
NOT_FOUND = -704


class StoreClient(Protocol):
    """The calls the tier makes; each may block for as long as the store makes it."""

    def put_from(self, key: str, address: int, size: int) -> int: ...

    def get_into(self, key: str, address: int, size: int) -> int: ...  # bytes read, or a negative code

    def exists(self, keys: list[str]) -> list[int]: ...  # 1 held, 0 not, negative: an error

    def register(self, address: int, size: int) -> int: ...

    def close(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Binaries:
    master: Path
    store: Path  # the standalone store process that owns the memory (`mooncake_client` in the wheel)


def installed_binaries() -> Binaries | None:
    """The wheel's `mooncake_master` and store-process binaries, or None when the extra is not installed."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = Binaries(folder / "mooncake_master", folder / "mooncake_client")
    return found if found.master.is_file() and found.store.is_file() else None


class MooncakeClient:
    """A `StoreClient` on `mooncake.store.MooncakeDistributedStore`: contributes no memory of its own (the store
    process does), so an engine that exits takes no one's blocks with it."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def setup(cls, master: str, host: str, local_buffer_bytes: int) -> tuple[MooncakeClient, int]:
        """A client and `setup`'s return code (0: connected). Blocks while the master is unreachable: the caller
        runs it on a thread with a deadline."""
        store = importlib.import_module("mooncake.store")
        native = store.MooncakeDistributedStore()
        rc = native.setup(host, "P2PHANDSHAKE", 0, local_buffer_bytes, "tcp", "", master)
        return cls(native), int(rc)

    def put_from(self, key: str, address: int, size: int) -> int:
        return int(self._native.put_from(key, address, size))

    def get_into(self, key: str, address: int, size: int) -> int:
        return int(self._native.get_into(key, address, size))

    def exists(self, keys: list[str]) -> list[int]:
        return [int(v) for v in self._native.batch_is_exist(keys)]

    def register(self, address: int, size: int) -> int:
        return int(self._native.register_buffer(address, size))

    def close(self) -> int:
        return int(self._native.close())
