"""Where a slot lives in its pool's file and what its header says.

A pool is one preallocated file of `num_slots` fixed-size slots. A slot is one aligned header block followed by the
payload, padded to the alignment: `[header 4 KiB][payload ... pad]`, so header and payload go to disk in one
`pwritev` and come back in one `preadv`, and the payload can be read straight into an aligned destination.

The header names the key, the identity digest, a sequence number and the payload's checksum, and carries a CRC of
itself. A load is served only when all of them match what was asked: a torn write (header from one write, payload
partly from another), a slot since reused for another key, or a flipped byte is a miss, never wrong bytes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from toolkit.tiers.disk.aligned import ALIGN_BYTES, round_up

HEADER_BYTES = ALIGN_BYTES
MAX_KEY_BYTES = 64
_MAGIC = b"KVTKSLT1"
# magic, format version, key length, identity digest, sequence, payload length, payload checksum, key
_HEADER = struct.Struct("<8sHB16sQIQ64s")
_HEADER_CRC = struct.Struct("<I")
HEADER_USED_BYTES = _HEADER.size + _HEADER_CRC.size  # the rest of the header block is zeros


@dataclass(frozen=True, slots=True)
class SlotHeader:
    format_version: int
    identity: bytes  # 16-byte digest
    seq: int
    payload_bytes: int
    checksum: int
    key: bytes

    def pack_into(self, buffer: memoryview) -> None:
        """Write the header at the start of `buffer` (at least HEADER_BYTES); the rest of the block is zeroed."""
        body = _HEADER.pack(
            _MAGIC,
            self.format_version,
            len(self.key),
            self.identity,
            self.seq,
            self.payload_bytes,
            self.checksum,
            self.key,
        )
        buffer[: len(body)] = body
        buffer[len(body) : len(body) + _HEADER_CRC.size] = _HEADER_CRC.pack(zlib.crc32(body))
        end = len(body) + _HEADER_CRC.size
        buffer[end:HEADER_BYTES] = bytes(HEADER_BYTES - end)

    @classmethod
    def unpack(cls, buffer: memoryview | bytes) -> SlotHeader | None:
        """The header at the start of `buffer`, or None when it is not one (never written, torn, corrupted)."""
        body = bytes(buffer[: _HEADER.size])
        (crc,) = _HEADER_CRC.unpack_from(buffer, _HEADER.size)
        if crc != zlib.crc32(body):
            return None
        magic, version, key_len, identity, seq, payload_bytes, checksum, key = _HEADER.unpack(body)
        if magic != _MAGIC or key_len > MAX_KEY_BYTES:
            return None
        return cls(version, identity, seq, payload_bytes, checksum, key[:key_len])


@dataclass(frozen=True, slots=True)
class PoolGeometry:
    """Slots of one pool: the payload each holds and how many fit."""

    payload_bytes: int
    num_slots: int

    @property
    def slot_bytes(self) -> int:
        return HEADER_BYTES + round_up(self.payload_bytes)

    @property
    def file_bytes(self) -> int:
        return self.slot_bytes * self.num_slots

    def offset(self, slot: int) -> int:
        return slot * self.slot_bytes

    def payload_pad_bytes(self) -> int:
        return round_up(self.payload_bytes) - self.payload_bytes
