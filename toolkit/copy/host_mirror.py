"""Host mirrors: one host tensor `[num_host_blocks, row_bytes]` int8 per copy region.

Host block id `h` names row `h` of every mirror, as device block id `b` names row `b` of every region.
On CUDA the mirrors are pinned by registering the allocation with the driver (`cuMemHostRegister`, through the
ctypes bindings of cuda_driver.py): PyTorch's pinned allocator rounds every request up to a power of two (100 GB
would take 128 GB), and the runtime's `cudaHostRegister` leaves its last error set on failure, which the next
torch kernel then raises as its own. When registration fails the mirrors stay pageable, with one warning: copies
still work, at lower bandwidth and without async overlap (and without the Triton backend, which needs pinned,
device-mapped mirrors). `close()` (or leaving a `with` block) unregisters and unmaps.
Optionally the bytes live in one file-backed `mmap` (created owner-only, 0600), e.g. on /dev/shm. Otherwise each
mirror is an anonymous mapping on transparent huge pages where the kernel allows (hugepages.py: random small
blocks then cost no TLB miss per block on the host side), pre-faulted, else plain `torch.zeros`.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch

from toolkit.copy.hugepages import allocate_zeroed
from toolkit.copy.regions import CopyRegion

log = logging.getLogger(__name__)

# Rows of every mirror start on this boundary inside a shared mmap (page size: DMA and O_DIRECT friendly).
_MMAP_ALIGN_BYTES = 4096


class HostRegistrar(Protocol):
    """Pins host memory: the driver bindings (`cuda_driver.DriverCalls`), or a fake in CPU tests."""

    def register_host(self, ptr: int, size: int) -> None:
        """Raise on failure, leaving no other state behind."""

    def unregister_host(self, ptr: int) -> None: ...


@dataclass(frozen=True, kw_only=True)
class HostMirror(CopyRegion):
    """The host copy of one region: the same dense `[num_blocks, row_bytes]` int8 shape, in host memory."""


@dataclass(kw_only=True)
class HostMirrorSet:
    """All mirrors of one worker and what must be released with them (`close()` is idempotent)."""

    mirrors: tuple[HostMirror, ...]
    pinned: bool
    path: str | None = None
    _registered_ptrs: list[int] = field(default_factory=list, repr=False)
    _registrar: HostRegistrar | None = field(default=None, repr=False)
    _mmap: mmap.mmap | None = field(default=None, repr=False)

    @property
    def num_blocks(self) -> int:
        return self.mirrors[0].num_blocks if self.mirrors else 0

    @property
    def total_bytes(self) -> int:
        return sum(m.view.numel() for m in self.mirrors)

    def __enter__(self) -> "HostMirrorSet":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        _unregister_all(self._registrar, self._registered_ptrs)
        self.pinned = False
        self.mirrors = ()
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                log.warning("host mirror mmap still referenced by a tensor; left to the garbage collector")
            self._mmap = None
        if self.path is not None and os.path.exists(self.path):
            os.unlink(self.path)
            self.path = None


def num_host_blocks_for(capacity_bytes: int, regions: Sequence[CopyRegion]) -> int:
    """How many host blocks `capacity_bytes` holds when every block has one row in every region (at least 1)."""
    bytes_per_block = sum(r.row_bytes for r in regions)
    if bytes_per_block <= 0:
        raise ValueError(f"regions: bytes per block must be > 0, got {bytes_per_block}")
    return max(1, capacity_bytes // bytes_per_block)


def _unregister_all(registrar: HostRegistrar | None, ptrs: list[int]) -> None:
    for ptr in ptrs:
        try:
            registrar.unregister_host(ptr)
        except Exception as exc:  # nothing left to do about it; the memory is freed with the process
            log.warning("host mirror: unregistering %#x failed (%s)", ptr, exc)
    ptrs.clear()


@dataclass(frozen=True)
class _DriverRegistrar:
    """The driver calls, made with the regions' device context current on the calling thread (they need one)."""

    driver: object
    device: torch.device | None

    def _make_current(self) -> None:
        if self.device is not None:
            torch.cuda.synchronize(self.device)  # makes the device's primary context current on this thread

    def register_host(self, ptr: int, size: int) -> None:
        self._make_current()
        self.driver.register_host(ptr, size)

    def unregister_host(self, ptr: int) -> None:
        self._make_current()
        self.driver.unregister_host(ptr)


def _default_registrar(regions: Sequence[CopyRegion]) -> HostRegistrar | None:
    """The CUDA driver, or None (warned) when there is none."""
    try:
        from toolkit.copy.cuda_driver import driver_calls

        return _DriverRegistrar(driver_calls(), next((r.device for r in regions if r.device.type == "cuda"), None))
    except Exception as exc:  # no driver library: pinning is an optimisation
        log.warning("host mirror: cannot pin through the CUDA driver (%s); mirrors stay pageable", exc)
        return None


def _pin_all(registrar: HostRegistrar, targets: Sequence[torch.Tensor], ptrs: list[int]) -> bool:
    """Register every target or none (half-pinned mirrors would make bandwidth depend on the region)."""
    for t in targets:
        try:
            registrar.register_host(t.data_ptr(), t.numel() * t.element_size())
        except Exception as exc:
            log.warning("host mirror: %s; mirrors stay pageable", exc)
            _unregister_all(registrar, ptrs)
            return False
        ptrs.append(t.data_ptr())
    return bool(targets)


def _open_owner_only(path: str, size: int) -> mmap.mmap:
    # O_EXCL|O_NOFOLLOW: never reuse or follow a file someone else prepared; 0600: KV bytes are user data.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def allocate_host_mirrors(
    regions: Sequence[CopyRegion],
    *,
    num_host_blocks: int,
    pin: bool | None = None,
    mmap_path: str | None = None,
    huge_pages: bool = True,
    registrar: HostRegistrar | None = None,
) -> HostMirrorSet:
    """One zeroed host tensor per region, `num_host_blocks` rows each.

    `pin=None` pins exactly when the regions live on CUDA. `mmap_path` backs all mirrors with one new file there.
    `huge_pages` (without `mmap_path`): advise transparent huge pages, falling back to ordinary pages.
    `registrar`: what pins (default: the CUDA driver). Use the result as a context manager, or `close()` it.
    """
    if num_host_blocks <= 0:
        raise ValueError(f"num_host_blocks: must be > 0, got {num_host_blocks}")
    if pin is None:
        pin = any(r.device.type == "cuda" for r in regions)
    sizes = [num_host_blocks * r.row_bytes for r in regions]
    mapping = None
    if mmap_path is not None:
        offsets, total = [], 0
        for size in sizes:
            offsets.append(total)
            total += -(-size // _MMAP_ALIGN_BYTES) * _MMAP_ALIGN_BYTES
        mapping = _open_owner_only(mmap_path, max(total, _MMAP_ALIGN_BYTES))
        whole = torch.frombuffer(mapping, dtype=torch.int8)  # fresh file pages read as zero
        buffers = [whole[o : o + s] for o, s in zip(offsets, sizes)]
    else:
        buffers = [allocate_zeroed(s, huge_pages=huge_pages) for s in sizes]
    mirrors = tuple(
        HostMirror(name=r.name, view=b.view(num_host_blocks, r.row_bytes)) for r, b in zip(regions, buffers)
    )
    result = HostMirrorSet(mirrors=mirrors, pinned=False, path=mmap_path, _mmap=mapping)
    if pin:
        registrar = registrar or _default_registrar(regions)
        if registrar is not None:
            result._registrar = registrar
            # Register whole allocations once (one call for the mmap, one per tensor otherwise).
            targets = [torch.frombuffer(mapping, dtype=torch.int8)] if mapping is not None else buffers
            result.pinned = _pin_all(registrar, targets, result._registered_ptrs)
    return result
