"""The reference side of `kvtk bench tiers`: the same file system's own O_DIRECT rate, measured in the same run.

`raw_rate` is a plain loop: `queue_depth` threads, each issuing one `os.preadv` / `os.pwritev` of `block_bytes`
at a time at random block-aligned offsets of a file as large as the tier's, nothing else (no header, no checksum,
no index). Each thread cycles through `buffers_per_thread` aligned buffers, as the tier's caller cycles through as
many destinations (host blocks): on this VM reading into the same buffer again and again ran 1.3x faster than
into 16 distinct ones (the hypervisor's DMA mapping, not the file system), so a one-buffer loop would not be the
same conditions. `fio_rate` runs fio on that same file with the same block size and queue
depth (libaio, direct) when fio is installed: an independent column, absent otherwise.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

from toolkit.tiers.disk.aligned import O_DIRECT, aligned_buffer


def describe_folder(folder: Path) -> str:
    """`<fs type> on <device>` for the mount holding `folder` (from /proc/mounts)."""
    best = ("?", "?", "")
    target = str(folder.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown file system"
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) >= len(best[2]):
                best = (parts[2], parts[0], parts[1])
    return f"{best[0]} on {best[1]} (mounted at {best[2]})"


def make_file(path: Path, size_bytes: int, direct: bool) -> None:
    """A file of `size_bytes` of random-ish data (written, not sparse: a read of a hole never touches the disk)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | (O_DIRECT if direct else 0), 0o600)
    chunk = aligned_buffer(8 << 20)
    chunk.write(os.urandom(len(chunk)))
    try:
        for offset in range(0, size_bytes, len(chunk)):
            os.pwrite(fd, memoryview(chunk)[: min(len(chunk), size_bytes - offset)], offset)
        os.fsync(fd)
    finally:
        os.close(fd)
        chunk.close()


def raw_rate(
    path: Path, block_bytes: int, queue_depth: int, total_bytes: int, *, write: bool, direct: bool,
    buffers_per_thread: int = 1, seed: int = 0, memory: mmap.mmap | None = None,
) -> float:  # fmt: skip
    """Bytes per second of `total_bytes` in random block-aligned `block_bytes` I/Os, `queue_depth` at a time."""
    num_blocks = os.path.getsize(path) // block_bytes
    ops = max(queue_depth, total_bytes // block_bytes)
    rng = random.Random((block_bytes * 31 + queue_depth) * 1_000_003 + seed)
    offsets = [rng.randrange(num_blocks) * block_bytes for _ in range(ops)]
    fd = os.open(path, os.O_RDWR | (O_DIRECT if direct else 0))
    share = [offsets[n::queue_depth] for n in range(queue_depth)]
    errors: list[BaseException] = []
    # Buffers are made and filled before the clock starts (os.urandom runs at a fraction of a disk's rate).
    # `memory` (reused across calls, as the tier's caller reuses its destinations: fresh pages read slower here)
    if memory is None or len(memory) < block_bytes * buffers_per_thread * queue_depth:
        memory = aligned_buffer(block_bytes * buffers_per_thread * queue_depth)
        pattern = os.urandom(block_bytes)
        for n in range(buffers_per_thread * queue_depth):
            memory[n * block_bytes : (n + 1) * block_bytes] = pattern
    views = [memoryview(memory)[n * block_bytes : (n + 1) * block_bytes] for n in range(len(memory) // block_bytes)]

    started = threading.Barrier(queue_depth + 1)  # the clock starts once every thread runs (short runs too)

    def loop(thread: int) -> None:
        mine = share[thread]
        own = [[views[thread * buffers_per_thread + n]] for n in range(buffers_per_thread)]
        started.wait()
        try:
            for n, offset in enumerate(mine):
                view = own[n % buffers_per_thread]
                done = os.pwritev(fd, view, offset) if write else os.preadv(fd, view, offset)
                if done != block_bytes:
                    raise OSError(f"short I/O: {done} of {block_bytes}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(queue_depth)]
    for thread in threads:
        thread.start()
    started.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    os.close(fd)
    if errors:
        raise errors[0]
    return ops * block_bytes / elapsed


def fio_rate(path: Path, block_bytes: int, queue_depth: int, total_bytes: int, *, write: bool) -> float | None:
    """fio's bytes per second on the same file, block size and queue depth, or None without fio."""
    fio = shutil.which("fio")
    if fio is None:
        return None
    command = [
        fio, "--name=kvtk", f"--filename={path}", f"--rw={'randwrite' if write else 'randread'}",
        f"--bs={block_bytes}", f"--iodepth={queue_depth}", "--ioengine=libaio", "--direct=1",
        f"--size={os.path.getsize(path)}", f"--io_size={total_bytes}", "--output-format=json",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        job = json.loads(done.stdout)["jobs"][0]["write" if write else "read"]
        return float(job["bw_bytes"])
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError):
        return None
