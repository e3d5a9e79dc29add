"""One kernel-AIO request of the disk tier and the memory it needs (a *lane*): its iocb, its iovec pair
`[header block][payload]`, its aligned header block, and a staging buffer for a payload that cannot go to or come
from the caller's memory directly (unaligned, or padded on disk), made on first need.

A read lands straight in the caller's aligned destination (or in staging), and `result` verifies it exactly as the
thread path does (`io_ops.verify`: header, identity, key, payload checksum), copying out of staging only once it
verified. A write is prepared like `io_ops.write_slot`: the payload's checksum and the slot header are computed
before it is submitted (on an I/O thread, aio.py says why), and its commit record is appended only once the kernel
reported the whole slot written, so a crash can lose the write but never index a torn slot.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from toolkit.tiers.disk.aio_abi import IOCB_CMD_PREADV, IOCB_CMD_PWRITEV, IoCb, IoVec
from toolkit.tiers.disk.aligned import aligned_buffer, is_aligned
from toolkit.tiers.disk.commit_log import Op, Record
from toolkit.tiers.disk.io_ops import FileContext, verify
from toolkit.tiers.disk.layout import HEADER_BYTES, HEADER_USED_BYTES, SlotHeader
from toolkit.tiers.disk.workers import Done


@dataclass(slots=True)
class Request:
    ticket: int
    ctx: FileContext
    slot: int
    key: bytes
    data: memoryview  # a read's destination, a write's payload
    write: bool = False
    seq: int = 0  # a write's sequence number (its commit record's)
    checksum: int = 0  # a write's payload checksum
    submitted_s: float = 0.0
    direct: bool = False  # straight to or from `data` (else through the lane's staging buffer)
    pinned: object = None  # the ctypes view that exposes `data`'s address: alive while the kernel may use it
    reported_stuck: bool = False


def pointers(lanes: list[Lane]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * len(lanes))(*[ctypes.addressof(lane.iocb) for lane in lanes])


class Lane:
    def __init__(self, number: int, slot_bytes: int) -> None:
        self.number = number
        self.iocb = IoCb()
        self.pointer = (ctypes.c_void_p * 1)(ctypes.addressof(self.iocb))  # io_submit's array of one
        self.iov = (IoVec * 2)()
        self.buffer = memoryview(aligned_buffer(HEADER_BYTES))
        self.staging: memoryview | None = None
        self._slot_bytes = slot_bytes
        self._keep = [ctypes.c_char.from_buffer(self.buffer)]  # addresses of our own buffers stay valid
        self.iov[0].iov_base = ctypes.addressof(self._keep[0])
        self.iov[0].iov_len = HEADER_BYTES
        self.request: Request | None = None

    def _payload_address(self, req: Request) -> int:
        """Where the payload goes to or comes from: the caller's memory when the kernel may use it as it is."""
        req.direct = req.ctx.geometry.payload_pad_bytes() == 0 and is_aligned(req.data)
        if req.direct:
            req.pinned = ctypes.c_char.from_buffer(req.data)
            return ctypes.addressof(req.pinned)
        if self.staging is None:
            self.staging = memoryview(aligned_buffer(self._slot_bytes - HEADER_BYTES))
            self._keep.append(ctypes.c_char.from_buffer(self.staging))
        return ctypes.addressof(self._keep[1])

    def prepare(self, req: Request) -> None:
        """Fill the iocb for `req`; a write's header (with the payload's checksum) is packed here."""
        geometry = req.ctx.geometry
        self.iov[1].iov_base = self._payload_address(req)
        self.iov[1].iov_len = geometry.slot_bytes - HEADER_BYTES
        if req.write:
            payload = req.data
            if not req.direct:
                assert self.staging is not None
                n = geometry.payload_bytes
                self.staging[:n] = payload
                self.staging[n : geometry.slot_bytes - HEADER_BYTES] = bytes(geometry.payload_pad_bytes())
                payload = self.staging[:n]
            req.checksum = req.ctx.checksum.compute(payload)
            header = SlotHeader(req.ctx.format_version, req.ctx.identity, req.seq, len(payload), req.checksum, req.key)
            header.pack_into(self.buffer)
        cb = self.iocb
        cb.aio_data, cb.aio_lio_opcode = self.number, IOCB_CMD_PWRITEV if req.write else IOCB_CMD_PREADV
        cb.aio_fildes, cb.aio_buf, cb.aio_nbytes = req.ctx.fd, ctypes.addressof(self.iov), 2
        cb.aio_offset = geometry.offset(req.slot)
        self.request = req

    def result(self, res: int) -> Done:
        """The completion of this lane's request (on the loop thread, after the refill): a read verified, a write
        committed to the log."""
        req = self.request
        assert req is not None
        req.pinned = None  # the kernel is done with `data`: release its buffer export
        slot_bytes = req.ctx.geometry.slot_bytes
        what = "write" if req.write else "read"
        if res < 0:
            return Done(req.ticket, None, OSError(-res, f"aio {what}: {os.strerror(-res)}"))
        if res != slot_bytes:
            if req.write:
                return Done(req.ticket, None, OSError(f"short write: {res} of {slot_bytes} bytes"))
            return Done(req.ticket, f"short read: {res} of {slot_bytes} bytes", None)
        if req.write:
            try:
                req.ctx.log.append([Record(Op.COMMIT, req.ctx.pool, req.slot, req.seq, req.checksum, req.key)])
            except OSError as exc:
                return Done(req.ticket, None, exc)
            return Done(req.ticket, req.checksum, None)
        header = bytes(self.buffer[:HEADER_USED_BYTES])
        if req.direct:
            return Done(req.ticket, verify(req.ctx, header, req.key, req.data), None)
        assert self.staging is not None
        padded = self.staging[: req.ctx.geometry.payload_bytes]
        failed = verify(req.ctx, header, req.key, padded)
        if failed is None:
            req.data[:] = padded
        return Done(req.ticket, failed, None)
