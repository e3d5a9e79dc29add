"""The live run's shared store (`kvtk replay --engine live --store`): a running master's URL as given, or a local
Mooncake store started for the run (loopback, `--store-gib` of memory, its logs in the run folder's `store/`) and
stopped when the run ends, failed runs included. A store alone below the CPU tier is indexed whole (a running one:
`DEFAULT_INDEXED_BYTES`); below a disk tier (`--disk-gib`), the engine's index is the disk's size."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.experiments.config import ExperimentConfig

DEFAULT_INDEXED_BYTES = 64 << 30  # a store started elsewhere: what `kvtk serve --store` indexes by default


@dataclass(frozen=True, slots=True)
class StoreTier:
    url: str  # mooncake://HOST:PORT
    indexed_bytes: int  # the connector's `disk_bytes_to_use` with the store alone: how much of it the engine indexes


@contextlib.contextmanager
def run_store(config: ExperimentConfig, run_path: Path) -> Iterator[StoreTier | None]:
    store = config.live.store
    if not store:
        yield None
    elif store != "local":
        yield StoreTier(store, DEFAULT_INDEXED_BYTES)
    else:
        from toolkit.tiers.shared import StoreServer

        capacity_bytes = int((config.live.store_gib or 1.0) * 2**30)  # unset: 1 GiB (`--store-gib`'s default)
        with StoreServer(capacity_bytes, run_dir=run_path / "store", keep_dir=True) as server:
            yield StoreTier(f"mooncake://{server.master}", capacity_bytes)
