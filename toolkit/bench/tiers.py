"""The disk tier's throughput against its own file system's (`kvtk bench tiers`).

For each block size and queue depth, in one run: the tier's read rate (submit / poll, header + payload per slot,
the payload checksum verified, straight into aligned destinations as host-mirror rows are) against a plain
O_DIRECT `preadv` loop at the same block size and queue depth on a file of the same size in the same folder,
and fio's rate on that file when fio is installed; then the same for writes. Rates count payload
bytes only and are the best of `--repeats`; within a repeat raw and tier alternate every `--segment-mib` (16 MiB,
~10-20 ms here), and the ratio is the median over repeats of tier / raw within one repeat: this VM's disk
(virtio, host-cached) moved 0.6-1.9 GB/s between consecutive 48 MiB runs at 256 KiB, so run-level pairing left
the ratio to the disk's mood; segment-level pairing cancels most of it.
Target: tier read >= 0.8 x raw.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from toolkit.bench.tier_drive import bench_identity, drive
from toolkit.bench.tiers_policy import PolicyRow, StreamSpec, policy_table
from toolkit.bench.tiers_raw import describe_folder, fio_rate, make_file, raw_rate
from toolkit.errors import BadInput
from toolkit.limits import check_int
from toolkit.tiers.disk import Direct, DiskTier, DiskTierConfig, IoPath, PoolSpec
from toolkit.tiers.disk.aligned import aligned_buffer, logical_block_bytes

MIB = 1 << 20
TARGET = "tier read >= 0.8 x raw O_DIRECT at the same block size and queue depth"


@dataclass(frozen=True, slots=True)
class Row:
    op: str
    block_kib: int
    queue_depth: int
    io_path: str  # "aio" or "threads" (aio.py): how the tier's reads or writes reached the disk
    tier_gbps: float
    raw_gbps: float
    fio_gbps: float | None
    ratio: float
    tier_cpu_s_per_gb: float  # this process's CPU time per GB moved: what the tier costs a starved host
    raw_cpu_s_per_gb: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="folder on the file system to measure "
                        "(default: the temp dir); a scratch folder is made in it and removed")  # fmt: skip
    parser.add_argument("--block-kib", default="256,1024,4096", help="block sizes in KiB (default 256,1024,4096)")
    parser.add_argument("--queue-depths", default="1,4,16", help="queue depths (default 1,4,16)")
    parser.add_argument("--file-mib", type=int, default=512, help="tier and raw file size, MiB (default 512)")
    parser.add_argument("--mib", type=int, default=128, help="MiB moved per measurement (default 128)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per cell (default 3)")
    parser.add_argument("--segment-mib", type=int, default=16, help="raw and tier alternate every this many MiB "
                        "within a run (default 16)")  # fmt: skip
    parser.add_argument("--direct", choices=[d.value for d in Direct], default="auto", help="tier's O_DIRECT use")
    parser.add_argument("--io-paths", default="auto", help="the tier's I/O path(s), comma-separated: auto "
                        "(kernel AIO when libaio loads and O_DIRECT works, else the thread pool), aio, threads; "
                        "several measure each against raw in one run (default auto)")  # fmt: skip
    parser.add_argument("--policy-accesses", type=int, default=200_000, help="block reads of the write-policy "
                        "model (second table; 0 skips it; default 200000)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--tier", choices=["disk", "shared"], default="disk", help="disk (default), or the shared "
                        "store's put/get rate and latency (docs/shared-store.md)")  # fmt: skip
    parser.add_argument("--store", default="", help="--tier shared: mooncake://HOST:PORT of a running master "
                        "(default: start one on loopback)")  # fmt: skip
    parser.add_argument("--store-mib", type=int, default=1024, help="--tier shared: the store's memory, MiB")


def _ints(text: str, field: str, low: int, high: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BadInput(f"{field}: comma-separated integers, got {text!r:.60}") from None
    if not values:
        raise BadInput(f"{field}: give at least one value")
    return [check_int(v, field, low, high) for v in values]


def _drive(tier: DiskTier, keys: list[bytes], buffers: list[memoryview], *, write: bool) -> float:
    """Payload bytes per second moving `keys` through the tier, keeping it as busy as it accepts."""
    # like an engine polling once a step, not woken by every completion: half the destinations come back at once
    rate, _ = drive(tier, keys, buffers, write=write, poll_timeout_s=5.0, poll_at_least=max(1, len(buffers) // 2))
    return rate


@dataclass(frozen=True, slots=True)
class _Cell:
    """One (block size, queue depth) of a run: the raw file, the tier's and raw's buffers, the op counts."""

    raw: Path
    raw_direct: bool
    block_bytes: int
    queue_depth: int
    buffers: list[memoryview]
    raw_memory: mmap.mmap
    ops: int
    segment_ops: int


def _cells(scratch: Path, block_bytes: int, depths: list[int], args: argparse.Namespace) -> tuple[list[Row], bool]:
    raw = scratch / "raw.data"
    raw_direct = args.direct != "off"
    make_file(raw, args.file_mib * MIB // block_bytes * block_bytes, direct=raw_direct)
    rows: list[Row] = []
    direct = False
    for qd in depths:
        in_flight = 4 * qd  # the tier's default bound: the caller keeps that many submitted
        source = aligned_buffer(in_flight * block_bytes)
        source.write(os.urandom(len(source)))
        raw_memory = aligned_buffer(in_flight * block_bytes)
        raw_memory.write(os.urandom(len(raw_memory)))
        buffers = [memoryview(source)[n * block_bytes : (n + 1) * block_bytes] for n in range(in_flight)]
        cell = _Cell(raw, raw_direct, block_bytes, qd, buffers, raw_memory,
                     max(in_flight, args.mib * MIB // block_bytes),
                     max(4 * in_flight, args.segment_mib * MIB // block_bytes))  # fmt: skip
        paths = _io_paths(args)

        def open_tier(path: IoPath, qd: int = qd) -> DiskTier:
            # one store per block size, reopened at each queue depth and read path (neither is part of the
            # store): filled once
            return DiskTier.open(DiskTierConfig(folder=scratch / "tier", identity=bench_identity(block_bytes),
                                                pools=(PoolSpec("b", block_bytes, args.file_mib * MIB),),
                                                queue_depth=qd, direct=Direct(args.direct), io_path=path))  # fmt: skip

        with open_tier(paths[-1]) as tier:
            direct = tier.direct
            if not tier.stats().pools["b"].restored:
                _drive(tier, [b"fill%d" % n for n in range(tier.stats().occupancy["b"][1])], buffers, write=True)
            held = tier.held_keys("b")
        rows.extend(_measure(open_tier, cell, paths, held, False, args.repeats))
        rows.extend(_measure(open_tier, cell, paths, held, True, args.repeats))
        del buffers, cell  # the memoryviews of `source` go before it closes
        source.close()
        raw_memory.close()
    return rows, direct


def _io_paths(args: argparse.Namespace) -> list[IoPath]:
    try:
        paths = [IoPath(v.strip()) for v in args.io_paths.split(",") if v.strip()]
    except ValueError:
        raise BadInput(f"--io-paths: auto, aio or threads, comma-separated, got {args.io_paths!r:.60}") from None
    if not paths or len(set(paths)) != len(paths):
        raise BadInput(f"--io-paths: one or more distinct paths, got {args.io_paths!r:.60}")
    return paths


def _measure(open_tier: Callable[[IoPath], DiskTier], cell: _Cell, paths: list[IoPath], held: list[bytes],
             write: bool, repeats: int) -> list[Row]:  # fmt: skip
    """Tier against raw at one cell, `repeats` times per read path; within a repeat the paths take turns (each
    on a reopened store), so a slow minute of the shared disk hits every path alike."""
    qd, block_bytes, ops = cell.queue_depth, cell.block_bytes, cell.ops
    rates: dict[IoPath, list[tuple[float, float]]] = {path: [] for path in paths}  # (tier, raw) per repeat
    cpu = {path: [0.0, 0.0] for path in paths}  # (tier, raw) process seconds
    names: dict[IoPath, str] = {}
    for rep in range(repeats):
        keys = [b"w%d-%d-%d" % (qd, rep, n) for n in range(ops)] if write else _random_keys(held, ops, rep)
        for path in paths:
            with open_tier(path) as tier:
                names[path] = tier.write_path if write else tier.read_path
                mine = [key + b"-" + path.value.encode() for key in keys] if write else keys  # a write stores anew
                rates[path].append(_one_repeat(tier, cell, mine, write, rep, cpu[path]))
    moved_gb = repeats * ops * block_bytes / 1e9
    fio = fio_rate(cell.raw, block_bytes, qd, ops * block_bytes, write=write) if cell.raw_direct else None
    out = []
    for path in paths:
        paired = statistics.median(t / r for t, r in rates[path])
        out.append(Row("write" if write else "read", block_bytes // 1024, qd, names[path],
                       max(t for t, _ in rates[path]) / 1e9, max(r for _, r in rates[path]) / 1e9,
                       fio / 1e9 if fio else None, paired, cpu[path][0] / moved_gb, cpu[path][1] / moved_gb))  # fmt: skip
    return out


def _one_repeat(tier: DiskTier, cell: _Cell, keys: list[bytes], write: bool, rep: int,
                cpu: list[float]) -> tuple[float, float]:  # fmt: skip
    """(tier, raw) bytes per second over `keys`; raw and tier alternate every segment (16 MiB: ~10-20 ms here),
    so a slow second of a shared disk hits both sides; each side's rate is its bytes over its segments' times."""
    block_bytes, ops = cell.block_bytes, len(keys)
    raw_s = tier_s = 0.0
    for first in range(0, ops, cell.segment_ops):
        seg = keys[first : first + cell.segment_ops]
        before = time.process_time()
        raw_s += len(seg) * block_bytes / raw_rate(cell.raw, block_bytes, cell.queue_depth, len(seg) * block_bytes,
                                                   write=write, direct=cell.raw_direct,
                                                   buffers_per_thread=len(cell.buffers) // cell.queue_depth,
                                                   seed=rep * ops + first, memory=cell.raw_memory)  # fmt: skip
        middle = time.process_time()
        tier_s += len(seg) * block_bytes / _drive(tier, seg, cell.buffers, write=write)
        cpu[1] += middle - before
        cpu[0] += time.process_time() - middle
    return ops * block_bytes / tier_s, ops * block_bytes / raw_s


def _random_keys(held: list[bytes], ops: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.choice(held) for _ in range(ops)]


def _host(folder: Path, direct: bool, io_paths: list[str]) -> dict[str, str]:
    cpu = "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    from toolkit.tiers.disk.aio_abi import load
    from toolkit.tiers.disk.checksum import default_checksum

    libaio = load()
    return {
        "host": f"{os.cpu_count()}-vCPU {cpu}, {platform.system()} {platform.release()}",
        "file_system": describe_folder(folder),
        "logical_block_bytes": str(logical_block_bytes(folder)),
        "tier_io": "O_DIRECT" if direct else "buffered (page cache)",
        "tier_io_path": ", ".join(io_paths) + f" (libaio: {libaio.path if libaio else 'not installed'})",
        "checksum": default_checksum().name,
        "fio": shutil.which("fio") or "not installed",
        "load_average": "{:.1f} {:.1f} {:.1f} (1, 5, 15 min, at the end)".format(*os.getloadavg()),
    }


def run(args: argparse.Namespace) -> int:
    blocks = _ints(args.block_kib, "--block-kib", 4, 256 * 1024)
    depths = _ints(args.queue_depths, "--queue-depths", 1, 256)
    if args.tier == "shared":
        from toolkit.bench import tiers_shared

        return tiers_shared.run(args, blocks, [check_int(d, "--queue-depths", 1, 64) for d in depths])
    check_int(args.file_mib, "--file-mib", 16, 1 << 20)
    check_int(args.mib, "--mib", 1, 1 << 20)
    check_int(args.repeats, "--repeats", 1, 100)
    check_int(args.segment_mib, "--segment-mib", 1, 1 << 20)
    check_int(args.policy_accesses, "--policy-accesses", 0, 10_000_000)
    _io_paths(args)
    folder = Path(args.dir)
    if not folder.is_dir():
        raise BadInput(f"--dir: {args.dir!r} is not a folder")
    rows: list[Row] = []
    direct = False
    scratch = Path(tempfile.mkdtemp(prefix="kvtk-bench-tiers-", dir=folder))
    started = time.perf_counter()
    try:
        for kib in blocks:
            needed = 4 * max(depths) + 16  # more than the deepest queue keeps in flight: a write finds a slot
            if args.file_mib * MIB // (kib * 1024 + 4096) < needed:
                raise BadInput(
                    f"--file-mib: {args.file_mib} MiB holds fewer than {needed} blocks of {kib} KiB (4 x the "
                    f"deepest queue + 16); give more"
                )
            cell_dir = scratch / f"b{kib}"
            cell_dir.mkdir(mode=0o700)
            got, direct = _cells(cell_dir, kib * 1024, depths, args)
            rows.extend(got)
            shutil.rmtree(cell_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    host = _host(folder, direct, list(dict.fromkeys(r.io_path for r in rows)))
    spec = StreamSpec(accesses=args.policy_accesses)
    policies = policy_table(spec) if args.policy_accesses else []
    if args.json:
        policy_rows = [{**asdict(p), "write_amplification": p.write_amplification} for p in policies]
        report = {"host": host, "target": TARGET, "rows": [asdict(r) for r in rows], "policies": policy_rows}
        print(json.dumps({**report, "policy_stream": asdict(spec)}, indent=1))
        return 0
    _print_table(host, rows, time.perf_counter() - started)
    if policies:
        _print_policies(spec, policies)
    return 0


def _print_policies(spec: StreamSpec, rows: list[PolicyRow]) -> None:
    print(f"\nwrite policies (model, toolkit/bench/tiers_policy.py): {spec.accesses} block reads, "
          f"{spec.one_shot:.0%} one-shot, {spec.universe} reused blocks Zipf({spec.zipf_s}), CPU tier "
          f"{spec.cpu_blocks} blocks, disk {spec.disk_blocks}")  # fmt: skip
    print(f"{'policy':<15}{'written':>9}{'loaded':>9}{'written/loaded':>16}{'reads from disk':>17}")
    for r in rows:
        wa = f"{r.write_amplification:.2f}" if r.write_amplification is not None else "-"
        print(f"{r.policy:<15}{r.written:>9}{r.loaded:>9}{wa:>16}{r.disk_hit_share:>17.1%}")


def _print_table(host: dict[str, str], rows: list[Row], wall_s: float) -> None:
    out = sys.stdout
    for key, value in host.items():
        print(f"{key}: {value}", file=out)
    print(f"target: {TARGET}\n", file=out)
    print(f"{'op':<6}{'block':>8}{'QD':>4}{'I/O path':>10}{'tier GB/s':>11}{'raw GB/s':>10}{'fio GB/s':>10}{'tier/raw':>10}"
          f"{'CPU s/GB tier':>15}{'raw':>6}", file=out)  # fmt: skip
    for r in rows:
        fio = f"{r.fio_gbps:.2f}" if r.fio_gbps is not None else "-"
        block = f"{r.block_kib // 1024} MiB" if r.block_kib >= 1024 else f"{r.block_kib} KiB"
        print(f"{r.op:<6}{block:>8}{r.queue_depth:>4}{r.io_path:>10}{r.tier_gbps:>11.2f}{r.raw_gbps:>10.2f}{fio:>10}"
              f"{r.ratio:>10.2f}{r.tier_cpu_s_per_gb:>15.2f}{r.raw_cpu_s_per_gb:>6.2f}", file=out)  # fmt: skip
    print(file=out)
    for path in dict.fromkeys(r.io_path for r in rows if r.op == "read"):
        reads = [r.ratio for r in rows if r.op == "read" and r.io_path == path]
        print(f"reads ({path}): tier/raw {min(reads):.2f}-{max(reads):.2f} (target >= 0.8)", file=out)
    print(f"{wall_s:.1f} s", file=out)
