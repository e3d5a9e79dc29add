"""Aligned host buffers and whether a folder's file system takes O_DIRECT.

O_DIRECT needs the buffer address, the file offset and the length aligned to the device's logical block size
(512 B or 4 KiB). Every buffer here is an anonymous mmap (page-aligned, like posix_memalign(4096)), and every slot
offset and length is a multiple of `ALIGN_BYTES` = 4096, a multiple of any logical block size up to 4 KiB; the
probe refuses O_DIRECT on a device whose logical block is larger (rare: then the buffered path runs).

File systems that refuse O_DIRECT answer EINVAL at open (ramfs, some FUSE and network file systems) or at the
first I/O; the probe writes and reads one aligned block in a scratch file, so either way the tier knows before it
stores anything and falls back to buffered I/O with one log line.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from toolkit.private_fs import open_new_file, temp_name

ALIGN_BYTES = 4096
O_DIRECT = getattr(os, "O_DIRECT", 0)


def round_up(n: int, unit: int = ALIGN_BYTES) -> int:
    return -(-n // unit) * unit


def aligned_buffer(size_bytes: int) -> mmap.mmap:
    """A zeroed, page-aligned, writable buffer of `size_bytes` (rounded up to `ALIGN_BYTES`)."""
    return mmap.mmap(-1, round_up(max(size_bytes, 1)), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def address_of(buffer: memoryview) -> int:
    """The address of a writable buffer's first byte (to check its alignment)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def is_aligned(buffer: memoryview) -> bool:
    """True when a writable buffer can be handed to O_DIRECT as it is (address and length aligned)."""
    if buffer.readonly or not buffer.contiguous or buffer.nbytes % ALIGN_BYTES:
        return False
    return address_of(buffer.cast("B")) % ALIGN_BYTES == 0


@dataclass(frozen=True, slots=True)
class DirectSupport:
    direct: bool
    reason: str  # why not, or "ok"
    logical_block_bytes: int | None  # of the device under the folder, when /sys says it


def logical_block_bytes(folder: Path) -> int | None:
    """The logical block size of the block device holding `folder` (None for tmpfs, ramfs, network mounts)."""
    dev = os.stat(folder).st_dev
    sys_path = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for candidate in (sys_path / "queue/logical_block_size", sys_path / "../queue/logical_block_size"):
        try:
            return int(candidate.read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def probe_direct(folder: Path) -> DirectSupport:
    """Write and read back one aligned block with O_DIRECT in a scratch file of `folder` (removed after)."""
    lbs = logical_block_bytes(folder)
    if not O_DIRECT:
        return DirectSupport(False, "this platform has no O_DIRECT", lbs)
    if lbs is not None and ALIGN_BYTES % lbs:
        return DirectSupport(False, f"logical block of {lbs} B does not divide {ALIGN_BYTES} B", lbs)
    scratch = temp_name(folder / "direct-probe")
    os.close(open_new_file(scratch))
    buf = aligned_buffer(ALIGN_BYTES)
    try:
        fd = os.open(scratch, os.O_RDWR | O_DIRECT | getattr(os, "O_NOFOLLOW", 0))
        try:
            buf.write(b"kvtk-probe")
            os.pwrite(fd, buf, 0)
            os.preadv(fd, [buf], 0)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        return DirectSupport(False, f"O_DIRECT refused: {os.strerror(exc.errno)}", lbs)
    finally:
        buf.close()
        scratch.unlink(missing_ok=True)
    return DirectSupport(True, "ok", lbs)
