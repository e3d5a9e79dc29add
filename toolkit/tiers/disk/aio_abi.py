"""A ctypes binding of Linux native AIO through the system's `libaio.so.1`: the four calls the disk tier's read
submitter needs (io_setup, io_submit, io_getevents, io_destroy) and the kernel structures they take.

Why libaio and not io_uring: no liburing (nor a Python binding of it) is installed in this environment, while
libaio ships in the machine image (Debian's `libaio1`, which fio and databases use). Kernel AIO is asynchronous
only with O_DIRECT (a buffered read is done inside io_submit), so the tier uses it only when its files are open
with O_DIRECT. ctypes releases the GIL for every foreign call, so a thread blocked in io_getevents costs nothing.

The structures are the kernel's ABI (`include/uapi/linux/aio_abi.h`), not libaio's header (whose unions describe
the same 64 bytes): libaio's io_submit passes the iocb pointers to the system call untouched. Little-endian
x86-64/arm64 layout (on big-endian machines `aio_key` and `aio_rw_flags` swap places; `load()` refuses those).
libaio returns a negative errno instead of setting `errno`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

# aio_lio_opcode values (enum in aio_abi.h); 4 was an experimental PREADX, never merged.
IOCB_CMD_PREAD = 0
IOCB_CMD_PWRITE = 1
IOCB_CMD_PREADV = 7
IOCB_CMD_PWRITEV = 8


class IoVec(ctypes.Structure):
    """`struct iovec` (uio.h): one buffer of a vectored read."""

    _fields_ = [
        ("iov_base", ctypes.c_void_p),  # 0: the buffer's address
        ("iov_len", ctypes.c_size_t),  # 8: its length in bytes
    ]


class IoCb(ctypes.Structure):
    """`struct iocb` (aio_abi.h), 64 bytes: one request."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64),  # 0: handed back untouched in the completion's `data` (our lane number)
        ("aio_key", ctypes.c_uint32),  # 8: set by the kernel (little-endian order: key first)
        ("aio_rw_flags", ctypes.c_uint32),  # 12: RWF_* flags (RWF_HIPRI, RWF_DSYNC...); 0
        ("aio_lio_opcode", ctypes.c_uint16),  # 16: IOCB_CMD_*
        ("aio_reqprio", ctypes.c_int16),  # 18: request priority; 0
        ("aio_fildes", ctypes.c_uint32),  # 20: the file descriptor
        ("aio_buf", ctypes.c_uint64),  # 24: buffer address, or for PREADV/PWRITEV the iovec array's address
        ("aio_nbytes", ctypes.c_uint64),  # 32: bytes, or for PREADV/PWRITEV the number of iovecs
        ("aio_offset", ctypes.c_int64),  # 40: file offset (aligned for O_DIRECT)
        ("aio_reserved2", ctypes.c_uint64),  # 48: must be 0
        ("aio_flags", ctypes.c_uint32),  # 56: IOCB_FLAG_RESFD / IOCB_FLAG_IOPRIO; 0
        ("aio_resfd", ctypes.c_uint32),  # 60: an eventfd signalled on completion with IOCB_FLAG_RESFD; unused
    ]


class IoEvent(ctypes.Structure):
    """`struct io_event` (aio_abi.h), 32 bytes: one completion."""

    _fields_ = [
        ("data", ctypes.c_uint64),  # 0: the iocb's aio_data
        ("obj", ctypes.c_uint64),  # 8: the iocb's address
        ("res", ctypes.c_int64),  # 16: bytes transferred, or a negative errno
        ("res2", ctypes.c_int64),  # 24: a second result (0 for reads and writes)
    ]


class Timespec(ctypes.Structure):
    """`struct timespec`: io_getevents' longest wait."""

    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


assert ctypes.sizeof(IoCb) == 64 and ctypes.sizeof(IoEvent) == 32 and ctypes.sizeof(IoVec) == 16


@dataclass(frozen=True, slots=True)
class Libaio:
    """The loaded library's four calls (argument types set), each returning >= 0 or a negative errno."""

    path: str
    io_setup: Callable[..., int]  # (int maxevents, io_context_t *ctx)
    io_destroy: Callable[..., int]  # (io_context_t ctx)
    io_submit: Callable[..., int]  # (io_context_t ctx, long nr, struct iocb **iocbs) -> submitted
    io_getevents: Callable[..., int]  # (ctx, long min_nr, long nr, struct io_event *events, struct timespec *timeout)


_LOADED: list[Libaio | None] = []  # loaded once per process (a missing library is not looked for again)


def load() -> Libaio | None:
    """The system's libaio, or None when it is absent (or this is not a little-endian Linux)."""
    if not _LOADED:
        _LOADED.append(_load())
    return _LOADED[0]


def _load() -> Libaio | None:
    if not sys.platform.startswith("linux") or sys.byteorder != "little":
        return None
    for name in ("libaio.so.1", ctypes.util.find_library("aio")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            calls = (lib.io_setup, lib.io_destroy, lib.io_submit, lib.io_getevents)
        except (OSError, AttributeError):
            continue
        setup, destroy, submit, getevents = calls
        context_p = ctypes.POINTER(ctypes.c_void_p)
        setup.argtypes, setup.restype = (ctypes.c_int, context_p), ctypes.c_int
        destroy.argtypes, destroy.restype = (ctypes.c_void_p,), ctypes.c_int
        submit.argtypes, submit.restype = (ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p), ctypes.c_int
        getevents.argtypes = (ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.POINTER(IoEvent),
                              ctypes.POINTER(Timespec))  # fmt: skip
        getevents.restype = ctypes.c_int
        return Libaio(name, setup, destroy, submit, getevents)
    return None
