"""What a shared tier connects to and its bounds; checked before anything connects or allocates."""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.errors import BadInput
from toolkit.tiers.disk.identity import CacheIdentity
from toolkit.tiers.shared.frame import FRAME_HEADER_BYTES, MAX_POOL_CHARS

MAX_PAYLOAD_BYTES = 256 << 20
MAX_QUEUE_DEPTH = 64
MAX_STAGING_BYTES = 4 << 30  # queue_depth x (header + largest payload): each store thread's registered buffer
_POOL_NAME = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_POOL_CHARS}}}")
_URL = re.compile(r"mooncake://(?P<host>[A-Za-z0-9.-]{1,253}|\[[0-9a-fA-F:]{2,39}\]):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class SharedPool:
    """A kind of block the tier stores (a KV cache group kind): every value of a pool has `payload_bytes`."""

    name: str
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class SharedTierConfig:
    master: str  # host:port of `mooncake_master`
    identity: CacheIdentity
    pools: tuple[SharedPool, ...]
    queue_depth: int = 4  # threads, each with one call to the store at a time
    max_in_flight: int = 0  # submitted and not yet finished (timed-out calls included); 0: 4 x queue_depth
    op_timeout_s: float = 2.0  # a call not back by then completes as a timeout (a miss / a failed write)
    connect_timeout_s: float = 5.0
    failures_to_pause: int = 3  # consecutive store failures that pause the tier ...
    pause_s: float = 5.0  # ... for this long (refused at once, counted), then one call probes it
    local_buffer_bytes: int = 16 << 20  # the client's own transfer buffer (values go from registered staging)
    host: str = "127.0.0.1"  # this client's address, as the store process reaches it

    def __post_init__(self) -> None:
        parse_master(self.master, "master")
        if not 0 < len(self.pools) <= 64:
            raise BadInput(f"shared tier: pools must hold 1-64 pools, got {len(self.pools)}")
        for pool in self.pools:
            if not _POOL_NAME.fullmatch(pool.name):
                raise BadInput(f"shared tier: pool name {pool.name!r:.40} must be 1-{MAX_POOL_CHARS} of [A-Za-z0-9_.-]")
            if not 0 < pool.payload_bytes <= MAX_PAYLOAD_BYTES:
                raise BadInput(f"shared tier pool {pool.name}: payload_bytes must be 1-{MAX_PAYLOAD_BYTES}, "
                               f"got {pool.payload_bytes}")  # fmt: skip
        if len({p.name for p in self.pools}) != len(self.pools):
            raise BadInput("shared tier: pool names must differ")
        if not 0 < self.queue_depth <= MAX_QUEUE_DEPTH:
            raise BadInput(f"shared tier: queue_depth must be 1-{MAX_QUEUE_DEPTH}, got {self.queue_depth}")
        if self.max_in_flight < 0 or self.max_in_flight > 16 * MAX_QUEUE_DEPTH:
            raise BadInput(f"shared tier: max_in_flight must be 0-{16 * MAX_QUEUE_DEPTH}, got {self.max_in_flight}")
        for name in ("op_timeout_s", "connect_timeout_s", "pause_s"):
            value = getattr(self, name)
            if not 0 < value <= 600:
                raise BadInput(f"shared tier: {name} must be in (0, 600] s, got {value}")
        staging = self.queue_depth * (FRAME_HEADER_BYTES + max(p.payload_bytes for p in self.pools))
        if staging > MAX_STAGING_BYTES:
            raise BadInput(f"shared tier: queue_depth {self.queue_depth} x the largest value needs {staging} B of "
                           f"staging, more than {MAX_STAGING_BYTES} B; lower queue_depth")  # fmt: skip
        if not (1 << 20) <= self.local_buffer_bytes <= (4 << 30):
            raise BadInput(f"shared tier: local_buffer_bytes must be 1 MiB-4 GiB, got {self.local_buffer_bytes}")
        if not 0 < len(self.host) <= 253:
            raise BadInput(f"shared tier: host must be 1-253 characters, got {self.host!r:.60}")
        if not 0 < self.failures_to_pause <= 1000:
            raise BadInput(f"shared tier: failures_to_pause must be 1-1000, got {self.failures_to_pause}")

    @property
    def in_flight_bound(self) -> int:
        return self.max_in_flight or 4 * self.queue_depth

    def pool(self, name: str) -> SharedPool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise BadInput(f"shared tier: no pool {name!r:.40}; pools are {sorted(p.name for p in self.pools)}")


def parse_master(text: str, field: str) -> tuple[str, int]:
    """`host:port` -> (host, port); BadInput naming `field` otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or len(text) > 300:
        raise BadInput(f"{field}: give host:port (e.g. 127.0.0.1:50051), got {text!r:.60}")
    return host, int(port)


def parse_store_url(text: str) -> str:
    """`mooncake://host:port` (the form `kvtk serve --store` takes) -> the master's `host:port`."""
    match = _URL.fullmatch(text)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise BadInput(f"--store: give mooncake://HOST:PORT (the master's RPC address), got {text!r:.60}")
    return f"{match['host']}:{match['port']}"
