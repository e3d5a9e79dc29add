"""A read-only look at a disk store from another process: which keys it holds, if it is of the asked identity.

The connector's scheduler side uses it at start (vLLM builds the scheduler after the workers opened their stores,
so a store of another identity was already discarded and the index snapshotted): its first lookups must already
know what a restart kept on disk, before any worker could report it. Nothing is written, locked or created; a
missing, foreign or unreadable store holds nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

from toolkit.tiers.disk import manifest as files
from toolkit.tiers.disk.commit_log import log_cap_records, read_records
from toolkit.tiers.disk.identity import CacheIdentity, differences
from toolkit.tiers.disk.index import PoolIndex

log = logging.getLogger(__name__)


def held_keys(folder: Path, identity: CacheIdentity, pool: str) -> list[bytes]:
    """The keys `pool` of the store in `folder` holds ready, least recently used first; [] when the store is
    missing, unreadable or of another identity (its differences logged once, naming the fields)."""
    found = files.read_manifest(folder)
    if found is None:
        return []
    changed = differences(found.identity, identity)
    if changed:
        log.warning("disk tier %s: cache identity changed: %s; no block is reused", folder, "; ".join(changed))
        return []
    names = [name for name, _, _ in found.pools]
    if pool not in names:
        return []
    number = names.index(pool)
    slots = found.pools[number][2]
    total = sum(p[2] for p in found.pools)
    records = (
        read_records(folder / files.SNAPSHOT, total)[0] + read_records(folder / files.LOG, log_cap_records(total))[0]
    )
    index = PoolIndex(slots)
    index.restore([r for r in records if r.pool == number])
    return [r.key for r in index.records(number)]
