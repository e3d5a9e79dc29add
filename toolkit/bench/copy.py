"""Copy bandwidth per backend vs one contiguous copy of the same bytes (`kvtk bench copy`).

For each block size, id pattern (random non-consecutive, or consecutive) and direction, every available backend
copies one batch of `--batch-mib` MiB between a device pool and a host mirror; the ratio is its rate over one
contiguous copy of the same total bytes between the same two buffers, measured in the same run (the practical
limit). `paired` is the median over repeats of the same ratio within one repeat (less sensitive to a lucky or
unlucky window on either side). On CPU that limit is the faster of torch's `copy_` (with `--threads` intra-op threads) and the native
kernel given one descriptor per region (same threads, same store policy as the batch), so a faster copy loop in
the kernel cannot inflate the ratio. A mixed hybrid batch (small attention pages + one large state page per block)
closes the table. Reference and batch run alternately, best of `--repeats` each, after one warm-up run of each
(buffers are pre-faulted at allocation, so no first-touch page fault is timed on either side): other processes on
the machine perturb single runs. `--huge-pages` chooses which CPU buffers get transparent huge pages (host mirrors
always ask for them in the toolkit; the device pool is the caller's memory, so `host` is what a device cache
allocated by someone else sees where THP is `madvise`-only).

Run it with `OMP_WAIT_POLICY=PASSIVE` on small machines: otherwise torch's OpenMP workers keep spinning on a core
after each torch parallel region (the torch reference copy, descriptor building for 32K+ ids), and a multi-threaded
native copy right after competes with them (measured on 2 cores: 4 KiB random ratios 0.04 paired, 0.6 with it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import torch

from toolkit.bench.copy_backends import VLLM_SHAPE, driver_version, make_backends, native_contiguous
from toolkit.copy import Direction, RegionPair, allocate_host_mirrors
from toolkit.copy.hugepages import allocate_zeroed, thp_mode
from toolkit.copy.regions import regions_from_tensors
from toolkit.errors import BadInput

KIB = 1024
DEFAULT_BLOCK_KIB = (4, 16, 64, 256, 1024, 2048)
TARGETS = {
    "cpu": "ratio >= 0.8 for blocks >= 64 KiB, >= 0.5 at 4 KiB, mixed >= 0.7",
    "cuda": "ratio >= 0.9 for blocks >= 256 KiB, >= 0.8 at 16-32 KiB (best backend), each direction",
}


@dataclass(frozen=True, kw_only=True)
class Row:
    case: str
    block_bytes: int
    num_blocks: int
    ids: str
    direction: str
    backend: str
    built: str  # what ran under that name (e.g. `dma-loop` for cuda-dma on a driver without the batched call)
    gbps: float
    contiguous_gbps: float
    ratio: float
    reference: str
    paired_ratio: float  # median over repeats of (best reference / batch) within the repeat: less noise-prone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument(
        "--block-kib",
        type=int,
        nargs="+",
        default=list(DEFAULT_BLOCK_KIB),
        help="block sizes in KiB (default 4 .. 2048)",
    )
    parser.add_argument(
        "--batch-mib",
        type=int,
        default=None,
        help="bytes per batch (default 128 cpu: 4x the 32 MiB L3 here, so neither side is cache-resident; 256 cuda)",
    )
    parser.add_argument(
        "--block-counts",
        type=int,
        nargs="+",
        default=None,
        help="time a grid instead: every --block-kib size at each of these block counts (cells above "
        "--max-grid-mib skipped); the text output then ends with the grid by backend",
    )
    parser.add_argument("--max-grid-mib", type=int, default=1024, help="largest batch a grid cell copies")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="cpu backend threads per batch")
    parser.add_argument("--backends", nargs="+", default=None, help="subset of backends to run")
    parser.add_argument(
        "--require",
        nargs="+",
        default=[],
        help="exit 3 unless these backends could be built (e.g. triton: its warm-up copy must succeed)",
    )
    parser.add_argument(
        "--huge-pages",
        choices=("all", "host", "none"),
        default="all",
        help="cpu buffers on transparent huge pages: device pool and host mirrors, host mirrors "
        "only, or none (default all)",
    )


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _times(fns, repeats: int, device: str) -> list[list[float]]:
    """Per repeat, the time of each of `fns`, run in turn so load from other processes hits all of them alike."""
    for fn in fns:  # warm-up: first touch, lazy init, kernel compile
        fn()
        _sync(device)
    times = []
    for _ in range(repeats):
        row = []
        for fn in fns:
            start = time.perf_counter()
            fn()
            _sync(device)
            row.append(time.perf_counter() - start)
        times.append(row)
    return times


def _measure(case: str, caches: dict, num_blocks: int, args, ids_kind: str, rows: list[Row], built: dict) -> None:
    regions = regions_from_tensors(caches)
    with allocate_host_mirrors(
        regions, num_host_blocks=regions[0].num_blocks, huge_pages=args.huge_pages != "none"
    ) as host:
        pairs = [RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, host.mirrors)]
        backends = make_backends(pairs, args.device, args.threads, args.backends, host.pinned, built)
        try:
            _measure_backends(case, regions, host, backends, num_blocks, args, ids_kind, rows, built)
        finally:
            for backend in backends.values():
                backend.close()


def _measure_backends(
    case, regions, host, backends, num_blocks: int, args, ids_kind: str, rows: list[Row], built: dict
) -> None:
    pool = regions[0].num_blocks
    block_bytes = sum(r.row_bytes for r in regions)
    total = num_blocks * block_bytes
    pieces = _contiguous_pieces(regions, host, total)

    def contiguous(to_host: bool) -> None:
        for d, h in pieces:
            (h.copy_(d, non_blocking=True) if to_host else d.copy_(h, non_blocking=True))

    native_refs = {
        Direction.STORE: native_contiguous(backends.get("cpu"), pieces),
        Direction.LOAD: native_contiguous(backends.get("cpu"), [(h, d) for d, h in pieces]),
    }
    src, dst = _block_ids(ids_kind, pool, num_blocks)
    for direction in (Direction.STORE, Direction.LOAD):
        to_host = direction is Direction.STORE
        for name, backend in backends.items():
            refs = {"torch": lambda: contiguous(to_host)}
            if native_refs[direction] is not None:
                refs["native"] = native_refs[direction]
            try:
                times = _times(
                    [*refs.values(), _batch_copy(name, backend, direction, src, dst)], args.repeats, args.device
                )
            except Exception as exc:  # one backend failing must not lose the other rows; run() exits 4
                failure = f"{case} x{num_blocks} {ids_kind} {direction.value}: {type(exc).__name__}: {exc}"
                built[name].setdefault("failures", []).append(failure[:400])
                continue
            *ref_times, t = (min(column) for column in zip(*times))
            ref_name, ref = min(zip(refs, ref_times), key=lambda kv: kv[1])
            paired = sorted(min(row[:-1]) / row[-1] for row in times)
            rows.append(
                Row(
                    case=case,
                    block_bytes=block_bytes,
                    num_blocks=num_blocks,
                    ids=ids_kind,
                    direction=direction.value,
                    backend=name,
                    built=built[name]["built"],
                    gbps=total / t / 1e9,
                    contiguous_gbps=total / ref / 1e9,
                    ratio=ref / t,
                    reference=ref_name,
                    paired_ratio=paired[len(paired) // 2],
                )
            )


def _contiguous_pieces(regions, host, total: int) -> list:
    """(device, host) flat slices covering `total` bytes: the practical limit is one contiguous copy of the same
    bytes between the same two memories."""
    dev_flat = [r.view.reshape(-1) for r in regions]
    host_flat = [m.view.reshape(-1) for m in host.mirrors]
    pieces, left = [], total
    for d, h in zip(dev_flat, host_flat):
        n = min(left, d.numel())
        pieces.append((d[:n], h[:n]))
        left -= n
        if left <= 0:
            break
    return pieces


def _block_ids(ids_kind: str, pool: int, num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) block ids: a seeded random draw from the pool, or two consecutive runs."""
    gen = torch.Generator().manual_seed(0)
    if ids_kind == "random":
        src = torch.randperm(pool, generator=gen)[:num_blocks]
        dst = torch.randperm(pool, generator=gen)[:num_blocks]
        return src, dst
    return torch.arange(num_blocks), torch.arange(pool - num_blocks, pool)


def _batch_copy(name: str, backend, direction, src, dst):
    """One batch through `backend`, waited for; a failed copy raises."""
    counter = [0]

    def once() -> None:
        counter[0] += 1
        backend.submit(direction=direction, event_id=counter[0], src_block_ids=src, dst_block_ids=dst)
        backend.flush(60)
        for outcome in backend.poll():
            if not outcome.ok:
                raise RuntimeError(f"{name}: copy failed: {outcome.error}")

    return once


def check_at_least_one(values_by_flag: dict[str, list[int]]) -> None:
    """BadInput naming the flag unless every value of every list is >= 1 (sizes and counts)."""
    for flag, values in values_by_flag.items():
        if min(values) < 1:
            raise BadInput(f"{flag}: every value must be >= 1, got {min(values)}")


def run(args: argparse.Namespace) -> int:
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda: no CUDA device visible")
    if args.repeats < 1:
        raise BadInput(f"--repeats: must be >= 1, got {args.repeats}")
    check_at_least_one({"--block-kib": args.block_kib, "--block-counts": args.block_counts or [1]})
    if args.max_grid_mib < 1:
        raise BadInput(f"--max-grid-mib: must be >= 1, got {args.max_grid_mib}")
    batch_bytes = (args.batch_mib or (128 if device == "cpu" else 256)) << 20
    huge_pool = device == "cpu" and args.huge_pages == "all"

    def pool_tensor(rows: int, row_bytes: int) -> torch.Tensor:
        """Random bytes, pre-faulted (on huge pages with `--huge-pages all`)."""
        if device != "cpu":
            return torch.randint(-128, 128, (rows, row_bytes), dtype=torch.int8, device=device)
        t = allocate_zeroed(rows * row_bytes, huge_pages=huge_pool).view(rows, row_bytes)
        step = max(1, (16 << 20) // row_bytes)
        for i in range(0, rows, step):
            t[i : i + step].random_(-128, 128)
        return t

    rows: list[Row] = []
    built: dict[str, dict] = {}
    started = time.perf_counter()
    threads_before = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(args.threads)  # the torch reference copies with as many threads as the backend
    try:
        _run_cases(args, batch_bytes, pool_tensor, rows, built)
    finally:
        torch.set_num_threads(threads_before)
    elapsed = time.perf_counter() - started
    header = _header(args, batch_bytes, elapsed, built)
    missing = [name for name in args.require if not (built.get(name) or {}).get("built")]
    failed = [name for name, facts in built.items() if facts.get("failures")]
    status = 3 if missing else 4 if failed else 0  # the rows of the backends that did build are still printed
    if missing:
        header["error"] = f"--require: not built: {', '.join(f'{n} ({built.get(n)})' for n in missing)}"
    elif failed:
        header["error"] = f"copies failed in: {', '.join(failed)} (see backends.<name>.failures)"
    if args.json:
        json.dump({**header, "rows": [asdict(r) for r in rows]}, sys.stdout, indent=1)
        print()
        return status
    _print_table(header, rows, args)
    if args.block_counts:
        print_grid(rows)
    if missing or failed:
        print(header["error"])
    return status


def _header(args, batch_bytes: int, elapsed: float, built: dict) -> dict:
    device = args.device
    return {
        "device": device,
        "batch_bytes": batch_bytes,
        "repeats": args.repeats,
        "seconds": elapsed,
        "threads": args.threads,
        "huge_pages": args.huge_pages if device == "cpu" else "n/a",
        "thp_mode": thp_mode(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "target": TARGETS[device],
        "backends": built,
        "driver_version": driver_version(device),
    }


def _print_table(header: dict, rows: list[Row], args) -> None:
    device = header["device"]
    print(
        f"copy bandwidth on {device}: {header['batch_bytes'] >> 20} MiB per batch, best of {args.repeats}, "
        f"{args.threads} threads, huge pages {header['huge_pages']} (THP {header['thp_mode']}), "
        f"OMP_WAIT_POLICY {header['omp_wait_policy']}; "
        f"ratio = backend / best contiguous copy of the same bytes"
    )
    print(
        f"{'case':>8} {'block':>9} {'blocks':>7} {'ids':>11} {'dir':>5} {'backend':>13} {'GB/s':>7} {'contig':>7} {'ratio':>6}"
        f" {'paired':>6} {'ref':>6}"
    )
    for r in rows:
        print(
            f"{r.case:>8} {r.block_bytes:>9} {r.num_blocks:>7} {r.ids:>11} {r.direction:>5} {r.backend:>13} {r.gbps:7.1f} "
            f"{r.contiguous_gbps:7.1f} {r.ratio:6.2f} {r.paired_ratio:6.2f} {r.reference:>6}"
        )
    print(f"target: {TARGETS[device]}  ({header['seconds']:.0f} s)")


def grid_cells(args, batch_bytes: int) -> list[tuple[int, int]]:
    """(block KiB, blocks per batch) to time: `batch_bytes` per block size, or the --block-counts grid, capped."""
    if not args.block_counts:
        return [(kib, max(8, batch_bytes // (kib * KIB))) for kib in args.block_kib]
    cap = args.max_grid_mib << 20
    return [(kib, n) for kib in args.block_kib for n in args.block_counts if kib * KIB * n <= cap]


def _run_cases(args, batch_bytes: int, pool_tensor, rows: list[Row], built: dict) -> None:
    for kib, num_blocks in grid_cells(args, batch_bytes):
        block = kib * KIB
        # Pool twice the batch so random ids spread over memory that is not all cache-resident.
        caches = {"kv": pool_tensor(2 * num_blocks, block)}
        for ids_kind in ("random", "consecutive"):
            _measure(f"{kib}KiB", caches, num_blocks, args, ids_kind, rows, built)
        del caches
    # Mixed hybrid batch: per block 8 attention pages of 16 KiB and one 1 MiB state page.
    mixed_blocks = max(8, batch_bytes // (8 * 16 * KIB + KIB * KIB))
    caches = {f"attn{i}": pool_tensor(2 * mixed_blocks, 16 * KIB) for i in range(8)}
    caches["state"] = pool_tensor(2 * mixed_blocks, KIB * KIB)
    _measure("mixed", caches, mixed_blocks, args, "random", rows, built)


def print_grid(rows: list[Row]) -> None:
    """GB/s per backend side by side, one line per (block size, block count), per direction and id pattern;
    `x vllm` is the best toolkit backend over vLLM's call shape (`vllm-batch`) in the same cell."""
    backends = list(dict.fromkeys(r.backend for r in rows if r.case != "mixed"))
    ours = [b for b in backends if b != VLLM_SHAPE]
    cells: dict[tuple, dict[str, Row]] = {}
    for r in rows:
        if r.case != "mixed":
            cells.setdefault((r.direction, r.ids, r.block_bytes, r.num_blocks), {})[r.backend] = r
    for direction in ("store", "load"):
        for ids in ("random", "consecutive"):
            keys = sorted(k for k in cells if k[:2] == (direction, ids))
            if not keys:
                continue
            print(f"\n{direction}, {ids} ids: GB/s (contig = one contiguous copy of the same bytes)")
            print(
                f"{'block KiB':>9} {'blocks':>7} {'MiB':>6} {'contig':>7}"
                + "".join(f" {b:>13}" for b in backends)
                + f" {'x vllm':>7}"
            )
            for key in keys:
                got = cells[key]
                contig = max(r.contiguous_gbps for r in got.values())
                line = f"{key[2] // KIB:>9} {key[3]:>7} {key[2] * key[3] / (1 << 20):>6.1f} {contig:>7.1f}"
                line += "".join(f" {got[b].gbps:>13.1f}" if b in got else f" {'-':>13}" for b in backends)
                best = max((got[b].gbps for b in ours if b in got), default=0.0)
                line += f" {best / got[VLLM_SHAPE].gbps:>7.2f}" if VLLM_SHAPE in got else f" {'-':>7}"
                print(line)
