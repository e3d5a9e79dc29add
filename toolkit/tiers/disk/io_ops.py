"""What an I/O thread does for one slot: write header + payload in one `pwritev`, or read them in one `preadv`
and verify before the caller may use the bytes. A read straight into an aligned destination leaves its whole
verification (header and payload checksum) to a verifier thread, so the I/O thread's next read starts at once
(workers.py says why); the header block is copied out first, as the staging buffer is the next read's.

Each thread owns one aligned staging buffer of the largest slot. A payload whose memory is aligned (address and
length multiples of 4 KiB, as host-mirror rows are) goes to and from the file directly; any other payload is
copied through the staging buffer. Errors never escape: an `OSError` (EIO, ENOSPC) becomes a failed completion.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from toolkit.tiers.disk.aligned import aligned_buffer, is_aligned
from toolkit.tiers.disk.checksum import Checksum
from toolkit.tiers.disk.commit_log import CommitLog, Op, Record
from toolkit.tiers.disk.layout import HEADER_BYTES, HEADER_USED_BYTES, PoolGeometry, SlotHeader
from toolkit.tiers.disk.workers import Deferred


@dataclass(frozen=True, slots=True)
class FileContext:
    """What every op on one pool's file needs."""

    fd: int
    pool: int
    geometry: PoolGeometry
    identity: bytes
    format_version: int
    checksum: Checksum
    log: CommitLog
    fdatasync: bool


class Staging(threading.local):
    """One aligned buffer per I/O thread, allocated on the thread's first op."""

    def __init__(self, slot_bytes: int) -> None:
        self.buffer = memoryview(aligned_buffer(slot_bytes))


def _iov(ctx: FileContext, staging: Staging, payload: memoryview) -> tuple[list[memoryview], bool]:
    """The vectors for one slot: header block + payload (direct when aligned) or + the staging copy."""
    geometry = ctx.geometry
    header = staging.buffer[:HEADER_BYTES]
    if geometry.payload_pad_bytes() == 0 and is_aligned(payload):
        return [header, payload], True
    padded = staging.buffer[HEADER_BYTES : geometry.slot_bytes]
    return [header, padded], False


def write_slot(ctx: FileContext, staging: Staging, slot: int, seq: int, key: bytes, payload: memoryview) -> int:
    """Write `payload` for `key` into `slot`, then append its commit record; returns the payload checksum."""
    vectors, direct = _iov(ctx, staging, payload)
    n = ctx.geometry.payload_bytes
    if not direct:
        vectors[1][:n] = payload
        vectors[1][n:] = bytes(len(vectors[1]) - n)
    checksum = ctx.checksum.compute(vectors[1][:n])
    SlotHeader(ctx.format_version, ctx.identity, seq, n, checksum, key).pack_into(vectors[0])
    written = os.pwritev(ctx.fd, vectors, ctx.geometry.offset(slot))
    if written != ctx.geometry.slot_bytes:
        raise OSError(f"short write: {written} of {ctx.geometry.slot_bytes} bytes")
    if ctx.fdatasync:
        os.fdatasync(ctx.fd)  # the data is on the device before the record that names it
    ctx.log.append([Record(Op.COMMIT, ctx.pool, slot, seq, checksum, key)])
    return checksum


def read_slot(ctx: FileContext, staging: Staging, slot: int, key: bytes, dest: memoryview) -> str | None | Deferred:
    """Read `slot` into `dest`; None when it verified, else why not (then `dest` holds undefined bytes). On the
    direct path the verification is deferred: it reads `dest` and a copy of the header, nothing the next read
    touches."""
    vectors, direct = _iov(ctx, staging, dest)
    got = os.preadv(ctx.fd, vectors, ctx.geometry.offset(slot))
    if got != ctx.geometry.slot_bytes:
        return f"short read: {got} of {ctx.geometry.slot_bytes} bytes"
    header = bytes(vectors[0][:HEADER_USED_BYTES])
    if direct:
        return Deferred(lambda: verify(ctx, header, key, dest))
    padded = vectors[1][: ctx.geometry.payload_bytes]
    failed = verify(ctx, header, key, padded)
    if failed is None:
        dest[:] = padded
    return failed


def verify(ctx: FileContext, header_bytes: bytes, key: bytes, payload: memoryview) -> str | None:
    """None when the slot's header names `key` in this store and `payload` matches its checksum, else why not."""
    header = SlotHeader.unpack(header_bytes)
    if header is None:
        return "header corrupt or torn"
    if header.identity != ctx.identity or header.format_version != ctx.format_version:
        return "slot of another cache identity"
    if header.key != key or header.payload_bytes != len(payload):
        return "slot holds another key"
    if ctx.checksum.compute(payload) != header.checksum:
        return "payload checksum mismatch"
    return None
