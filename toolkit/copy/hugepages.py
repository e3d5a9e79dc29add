"""Zeroed, pre-faulted host buffers on transparent huge pages, with a plain `torch.zeros` fallback.

A random batch of 4 KiB blocks touches a new page per block on each side; with 4 KiB pages that is a TLB miss
(a page walk, nested under a hypervisor) per block per side, and rows that start 64 bytes into a torch
allocation straddle two pages. Host mirrors are therefore allocated as an anonymous private mapping aligned to
2 MiB, advised `MADV_HUGEPAGE` (the kernel default is often `madvise`-only) and pre-faulted, so the first copy
does not pay the page faults either. Where any step is unavailable (no `MADV_HUGEPAGE`, THP disabled, an old
kernel without `MADV_POPULATE_WRITE`) the buffer is still zeroed and pre-faulted, just on whatever pages the
kernel gives; `huge_page_bytes()` reports what the mapping actually got.
"""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import torch

log = logging.getLogger(__name__)

HUGE_PAGE_BYTES = 2 << 20
# From 2 MiB up a mapping can hold a huge page; below, plain torch memory.
_MIN_HUGE_BYTES = HUGE_PAGE_BYTES
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14; not exported by every Python
_THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The kernel's THP mode ('always', 'madvise', 'never'), or 'unknown' (not Linux, or sysfs unreadable)."""
    try:
        text = _THP_ENABLED.read_text()
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unknown"


def _madvise(mapping: mmap.mmap, advice: int, start: int, length: int) -> None:
    mapping.madvise(advice, start, length)


def allocate_zeroed(nbytes: int, *, huge_pages: bool = True) -> torch.Tensor:
    """A zeroed, pre-faulted 1-D int8 CPU tensor of `nbytes`, on huge pages when asked for and possible.

    The huge-page buffer starts on a 2 MiB boundary and keeps its mapping alive for as long as any view of it.
    """
    if nbytes < 0:
        raise ValueError(f"nbytes: must be >= 0, got {nbytes}")
    if not huge_pages or nbytes < _MIN_HUGE_BYTES or not hasattr(mmap, "MADV_HUGEPAGE") or thp_mode() == "never":
        return torch.zeros(nbytes, dtype=torch.int8)
    try:
        mapping = mmap.mmap(
            -1,
            nbytes + HUGE_PAGE_BYTES,
            flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
        )
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("huge pages: anonymous mapping of %d bytes failed (%s); using torch.zeros", nbytes, exc)
        return torch.zeros(nbytes, dtype=torch.int8)
    whole = torch.frombuffer(mapping, dtype=torch.int8)  # holds a reference to `mapping`
    offset = -whole.data_ptr() % HUGE_PAGE_BYTES
    buffer = whole[offset : offset + nbytes]
    del whole
    length = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
    try:
        _madvise(mapping, mmap.MADV_HUGEPAGE, offset, length)
    except OSError as exc:  # advisory: the buffer works on small pages too
        log.info("huge pages: madvise(MADV_HUGEPAGE) failed (%s); small pages", exc)
    try:
        _madvise(mapping, _MADV_POPULATE_WRITE, offset, length)
    except OSError:
        buffer.zero_()  # fresh anonymous pages already read as zero: this only faults them in
    return buffer


def huge_page_bytes(tensor: torch.Tensor) -> int:
    """Bytes of `tensor`'s mapping that sit on transparent huge pages (from /proc/self/smaps; 0 if unknown)."""
    start = tensor.data_ptr()
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return 0
    inside = False
    for line in lines:
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= start < hi
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return 0
