"""The commit log and the index snapshot: which slot holds which key, in a form that survives a crash.

A record is written only after its slot's data write has completed (with `durability="fdatasync"`, after the
data reached the device), so the log never names a slot before its bytes are there; each record carries its own
CRC, so a torn last record (the process killed mid-append) is skipped, never misread. The log is a hint, not the
proof: every load re-checks the slot header and payload checksum, so a record whose slot was later torn by an
unfinished overwrite only costs a miss.

Records are replayed in file order: the snapshot (written atomically at open and at a clean close, in LRU order),
then the log appended since. A later record for the same slot or key supersedes an earlier one (higher sequence).
"""

from __future__ import annotations

import enum
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from toolkit.private_fs import open_new_file, write_private_file
from toolkit.tiers.disk.layout import MAX_KEY_BYTES

# op, pool index, slot, sequence, payload checksum, key length, key
_RECORD = struct.Struct("<BxxxIIQQB64s")
_CRC = struct.Struct("<I")
RECORD_BYTES = _RECORD.size + _CRC.size


class Op(enum.IntEnum):
    COMMIT = 1  # the slot holds this key's verified-on-load payload
    DROP = 2  # the slot's content failed verification; forget it


@dataclass(frozen=True, slots=True)
class Record:
    op: Op
    pool: int
    slot: int
    seq: int
    checksum: int
    key: bytes

    def pack(self) -> bytes:
        body = _RECORD.pack(self.op, self.pool, self.slot, self.seq, self.checksum, len(self.key), self.key)
        return body + _CRC.pack(zlib.crc32(body))


def unpack_records(data: bytes) -> tuple[list[Record], int]:
    """Every valid record in `data`, and how many fixed-size chunks were invalid (torn or corrupted)."""
    records, bad = [], 0
    usable = len(data) - len(data) % RECORD_BYTES
    bad += len(data) != usable  # a torn tail shorter than one record
    for start in range(0, usable, RECORD_BYTES):
        body = data[start : start + _RECORD.size]
        (crc,) = _CRC.unpack_from(data, start + _RECORD.size)
        if crc != zlib.crc32(body):
            bad += 1
            continue
        op, pool, slot, seq, checksum, key_len, key = _RECORD.unpack(body)
        if op not in (Op.COMMIT, Op.DROP) or key_len > MAX_KEY_BYTES:
            bad += 1
            continue
        records.append(Record(Op(op), pool, slot, seq, checksum, key[:key_len]))
    return records, bad


def read_records(path: Path, max_records: int) -> tuple[list[Record], int]:
    """The records of a log or snapshot file (none when it is missing); a file longer than `max_records` records
    is read up to that bound only (the rest counted as invalid): a planted huge file costs no memory."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return [], 0
    try:
        size = os.fstat(fd).st_size
        limit = max_records * RECORD_BYTES
        data = os.read(fd, min(size, limit)) if size else b""
        extra = max(0, size - limit) // RECORD_BYTES
    finally:
        os.close(fd)
    records, bad = unpack_records(data)
    return records, bad + extra


def write_snapshot(path: Path, records: list[Record]) -> None:
    write_private_file(path, b"".join(r.pack() for r in records))


def log_cap_records(total_slots: int) -> int:
    """How many records the log may hold between two snapshots (and how many an open reads): 64 per slot, 6.5 KB
    per slot, under 1% of a store of 1 MiB blocks."""
    return 64 * total_slots + 4096


class CommitLog:
    """Append-only; I/O threads append concurrently (one `write` per batch under a lock, so records never
    interleave); with `sync` each append is O_DSYNC, durable when `write` returns.

    Bounded without ever compacting during a run (building a snapshot is O(slots) work on the caller's thread): past
    `cap_records` appends are skipped and counted. A clean close snapshots everything anyway; only a crash then
    loses the blocks written after the cap (lost, never served wrong: the slots still verify on load)."""

    def __init__(self, path: Path, *, sync: bool, cap_records: int) -> None:
        self.path = path
        self.cap_records = cap_records
        self.records = 0
        self.skipped = 0
        if not path.exists():
            os.close(open_new_file(path))
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags | (os.O_DSYNC if sync else 0))
        self._lock = threading.Lock()

    def append(self, records: list[Record]) -> None:
        data = b"".join(r.pack() for r in records)
        with self._lock:
            if self.records + len(records) > self.cap_records:
                self.skipped += len(records)
                return
            self.records += len(records)
            written = os.write(self._fd, data)
        if written != len(data):
            raise OSError(f"commit log: short append ({written} of {len(data)} bytes)")

    def truncate(self) -> None:
        with self._lock:
            os.ftruncate(self._fd, 0)
            self.records = 0

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
