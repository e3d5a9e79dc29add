"""What one value in the shared store holds: a fixed header, then the block's payload.

A store shared by several engines holds values this process did not write, so nothing in a value is trusted: the
header names the block key, the pool, the cache-identity digest, the payload length, the checksum algorithm and
the payload's checksum, and carries a CRC of itself. A read is served only when every field matches what was
asked and the payload verifies; a value of another identity, another key, a torn or flipped one is a counted miss.

    [header FRAME_HEADER_BYTES][payload payload_bytes]
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from toolkit.tiers.disk.checksum import Checksum, by_name

FRAME_HEADER_BYTES = 256
MAX_KEY_BYTES = 64
MAX_POOL_CHARS = 32
FRAME_VERSION = 1
_MAGIC = b"KVTKSHV1"
# magic, version, key length, pool length, identity digest, payload length, checksum algorithm, checksum, key, pool
_HEADER = struct.Struct("<8sHBB16sQB7xQ64s32s")
_CRC = struct.Struct("<I")
_ALGORITHMS = ("crc32", "xxh3-64")  # the header stores the index: a name the reader cannot compute is a miss


@dataclass(frozen=True, slots=True)
class FrameSpec:
    """What a read expects the value to be."""

    key: bytes
    pool: str
    identity: bytes  # 16-byte CacheIdentity digest
    payload_bytes: int

    @property
    def frame_bytes(self) -> int:
        return FRAME_HEADER_BYTES + self.payload_bytes


def pack_header(spec: FrameSpec, checksum: Checksum, payload: memoryview, out: memoryview) -> None:
    """Write the header for `payload` into out[:FRAME_HEADER_BYTES] (the caller puts the payload after it)."""
    pool = spec.pool.encode()
    body = _HEADER.pack(
        _MAGIC, FRAME_VERSION, len(spec.key), len(pool), spec.identity, len(payload),
        _ALGORITHMS.index(checksum.name), checksum.compute(payload), spec.key, pool,
    )  # fmt: skip
    end = len(body) + _CRC.size
    out[: len(body)] = body
    out[len(body) : end] = _CRC.pack(zlib.crc32(body))
    out[end:FRAME_HEADER_BYTES] = bytes(FRAME_HEADER_BYTES - end)


def verify(spec: FrameSpec, frame: memoryview) -> str:
    """ "ok" when `frame` is the value `spec` asks for, intact; else why not (the caller counts it as a miss)."""
    if len(frame) != spec.frame_bytes:
        return "length"
    body = bytes(frame[: _HEADER.size])
    (crc,) = _CRC.unpack_from(frame, _HEADER.size)
    if crc != zlib.crc32(body):
        return "header"
    magic, version, key_len, pool_len, identity, payload_len, algorithm, checksum, key, pool = _HEADER.unpack(body)
    if magic != _MAGIC or version != FRAME_VERSION:
        return "format"
    if identity != spec.identity:
        return "identity"
    if key[:key_len] != spec.key or pool[:pool_len] != spec.pool.encode() or payload_len != spec.payload_bytes:
        return "key"
    check = by_name(_ALGORITHMS[algorithm]) if algorithm < len(_ALGORITHMS) else None
    if check is None:
        return "checksum algorithm"
    if check.compute(frame[FRAME_HEADER_BYTES:]) != checksum:
        return "checksum"
    return "ok"
