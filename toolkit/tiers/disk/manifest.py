"""The store's files in its folder, and the decision at open: reuse them, or discard them and start empty.

    folder/manifest.json     format, checksum, cache identity, pools (written last when a store is created)
    folder/pool-<name>.data  one preallocated file of fixed-size slots per pool
    folder/commit.log        commit records appended since the last snapshot
    folder/index.snap        the index at the last open or clean close
    folder/lock              held (flock) while a process has the store open

Reuse needs every manifest field equal to what is asked and every pool file of the right size; otherwise one log
line says which field differs (old -> new) and the old files are removed, only those names, never the folder.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.private_fs import open_new_file, write_private_file
from toolkit.strict_load import json_loads, read_bounded
from toolkit.tiers.disk.identity import DISK_FORMAT_VERSION, CacheIdentity, differences
from toolkit.tiers.disk.layout import PoolGeometry

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LOG = "commit.log"
SNAPSHOT = "index.snap"
LOCK = "lock"
_MAX_MANIFEST_BYTES = 1 << 20


def pool_file(folder: Path, name: str) -> Path:
    return folder / f"pool-{name}.data"


@dataclass(frozen=True, slots=True)
class Manifest:
    identity: CacheIdentity
    checksum: str
    pools: tuple[tuple[str, int, int], ...]  # name, payload bytes, slots

    def to_text(self) -> str:
        body = {
            "format_version": DISK_FORMAT_VERSION,
            "checksum": self.checksum,
            "identity": self.identity.to_json(),
            "pools": [list(p) for p in self.pools],
        }
        return json.dumps(body, indent=1)


def _parse(text: str) -> tuple[Any, Manifest]:
    data = json_loads(text)
    if not isinstance(data, dict) or set(data) != {"format_version", "checksum", "identity", "pools"}:
        raise BadInput("manifest: not a disk tier manifest")
    pools = data["pools"]
    if not isinstance(pools, list) or not all(
        isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and all(type(v) is int for v in p[1:])
        for p in pools
    ):
        raise BadInput("manifest: pools malformed")
    if not isinstance(data["checksum"], str):
        raise BadInput("manifest: checksum malformed")
    found = Manifest(CacheIdentity.from_json(data["identity"]), data["checksum"], tuple(tuple(p) for p in pools))
    return data["format_version"], found


def read_manifest(folder: Path) -> Manifest | None:
    """The store's manifest, read only; None when there is none or it does not parse (nothing to reuse)."""
    path = folder / MANIFEST
    try:
        version, found = _parse(read_bounded(path, str(path), _MAX_MANIFEST_BYTES))
    except (OSError, BadInput, ValueError, UnicodeDecodeError):
        return None
    return found if version == DISK_FORMAT_VERSION else None


def why_not_reuse(folder: Path, wanted: Manifest) -> str | None:
    """None when the store in `folder` can be reused as `wanted`; else the reason, naming what differs."""
    path = folder / MANIFEST
    try:
        version, found = _parse(read_bounded(path, str(path), _MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        return "no manifest"
    except (BadInput, ValueError, UnicodeDecodeError) as exc:
        return f"manifest unreadable ({exc})"
    if version != DISK_FORMAT_VERSION:
        return f"format_version: {version!r:.20} -> {DISK_FORMAT_VERSION}"
    changed = differences(found.identity, wanted.identity)
    if changed:
        return "cache identity changed: " + "; ".join(changed)
    if found.checksum != wanted.checksum:
        return f"checksum: {found.checksum!r} -> {wanted.checksum!r}"
    if found.pools != wanted.pools:
        return f"pools: {list(found.pools)} -> {list(wanted.pools)}"
    for name, payload, slots in wanted.pools:
        expected = PoolGeometry(payload, slots).file_bytes
        try:
            size = os.lstat(pool_file(folder, name)).st_size
        except FileNotFoundError:
            return f"pool file {pool_file(folder, name).name} missing"
        if size != expected:
            return f"pool file {pool_file(folder, name).name}: {size} B, expected {expected} B"
    return None


def our_files(folder: Path) -> list[Path]:
    fixed = [folder / n for n in (MANIFEST, LOG, SNAPSHOT)]
    pools = sorted(p for p in folder.glob("pool-*.data"))
    return [p for p in fixed + pools if os.path.lexists(p)]


def discard(folder: Path, reason: str) -> None:
    """Remove an old store's files (the manifest first: a crash half-way leaves files a later open removes)."""
    files = our_files(folder)
    if not files:
        return
    total = sum(os.lstat(p).st_size for p in files)
    log.warning(
        "disk tier %s: %s; discarding the old store (%.1f MiB), no block is reused", folder, reason, total / 2**20
    )
    for path in files:
        path.unlink(missing_ok=True)


def create(folder: Path, manifest: Manifest) -> None:
    """Preallocate the pool files, then write the manifest (last: a store without one is never reused)."""
    for name, payload, slots in manifest.pools:
        fd = open_new_file(pool_file(folder, name))
        try:
            os.posix_fallocate(fd, 0, PoolGeometry(payload, slots).file_bytes)
        except OSError:
            os.ftruncate(fd, PoolGeometry(payload, slots).file_bytes)  # a file system without fallocate
        finally:
            os.close(fd)
    write_private_file(folder / MANIFEST, manifest.to_text())


def lock_folder(folder: Path) -> int:
    """An exclusive lock on the store, held until the fd is closed: two processes never share one store."""
    path = folder / LOCK
    if not path.exists():
        try:
            os.close(open_new_file(path))
        except FileExistsError:
            pass
    fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BadInput(f"disk tier folder: {str(folder)!r} is in use by another process; give another folder") from None
    return fd
