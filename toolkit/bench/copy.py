"""Copy bandwidth per backend vs one contiguous copy of the same bytes (`kvtk bench copy`).

For each block size, id pattern (random non-consecutive, or consecutive) and direction, every available backend
copies one batch of `--batch-mib` MiB between a device pool and a host mirror; the ratio is its rate over one
contiguous copy of the same total bytes between the same two buffers, measured in the same run (the practical
limit). A mixed hybrid batch (small attention pages + one large state page per block) closes the table. Best of
`--repeats` runs: other processes on the machine perturb single runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

import torch

from toolkit.copy import Direction, RegionPair, allocate_host_mirrors
from toolkit.copy.backend import CopyBackend
from toolkit.copy.regions import regions_from_tensors

KIB = 1024
DEFAULT_BLOCK_KIB = (4, 16, 64, 256, 1024, 2048)
TARGETS = {"cpu": "ratio >= 0.8 for blocks >= 64 KiB, >= 0.5 at 4 KiB, mixed >= 0.7",
           "cuda": "ratio >= 0.9 for blocks >= 256 KiB, >= 0.8 at 16-32 KiB (best backend), each direction"}


@dataclass(frozen=True, kw_only=True)
class Row:
    case: str
    block_bytes: int
    num_blocks: int
    ids: str
    direction: str
    backend: str
    gbps: float
    contiguous_gbps: float
    ratio: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--block-kib", type=int, nargs="+", default=list(DEFAULT_BLOCK_KIB),
                        help="block sizes in KiB (default 4 .. 2048)")
    parser.add_argument("--batch-mib", type=int, default=None, help="bytes per batch (default 128 cpu: 4x the 32 MiB L3 here, so neither side is cache-resident; 256 cuda)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="cpu backend threads per batch")
    parser.add_argument("--backends", nargs="+", default=None, help="subset of backends to run")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _best_pair(reference, candidate, repeats: int, device: str) -> tuple[float, float]:
    """Best times of `reference` and `candidate`, run alternately so load from other processes hits both alike."""
    for fn in (reference, candidate):  # warm-up: first touch, lazy init, kernel compile
        fn()
        _sync(device)
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for index, fn in enumerate((reference, candidate)):
            start = time.perf_counter()
            fn()
            _sync(device)
            best[index] = min(best[index], time.perf_counter() - start)
    return best[0], best[1]


def _make_backends(pairs, device: str, threads: int, wanted) -> dict[str, CopyBackend]:
    backends: dict[str, CopyBackend] = {}
    if device == "cpu":
        from toolkit.copy.cpu_backend import CpuCopyBackend

        native = CpuCopyBackend(store_pairs=pairs, num_threads=threads, asynchronous=False)
        if native.uses_native:
            backends["cpu"] = native
        backends["cpu-torch"] = CpuCopyBackend(store_pairs=pairs, use_native=False, asynchronous=False)
    else:
        from toolkit.copy.cuda_backend import CudaDmaBackend

        backends["cuda-dma"] = CudaDmaBackend(store_pairs=pairs, order_stores_after_compute=False)
        backends["cuda-dma-loop"] = CudaDmaBackend(store_pairs=pairs, order_stores_after_compute=False,
                                                   use_batch_call=False)
        try:
            from toolkit.copy.triton_backend import TritonCopyBackend

            backends["triton"] = TritonCopyBackend(store_pairs=pairs, order_stores_after_compute=False)
        except ImportError:
            pass
    return {k: v for k, v in backends.items() if wanted is None or k in wanted}


def _measure(case: str, caches: dict, num_blocks: int, args, ids_kind: str, rows: list[Row]) -> None:
    device = args.device
    regions = regions_from_tensors(caches)
    pool = regions[0].num_blocks
    host = allocate_host_mirrors(regions, num_host_blocks=pool)
    pairs = [RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, host.mirrors)]
    backends = _make_backends(pairs, device, args.threads, args.backends)
    block_bytes = sum(r.row_bytes for r in regions)
    total = num_blocks * block_bytes
    # The practical limit: one contiguous copy of the same bytes between the same two memories.
    dev_flat = [r.view.reshape(-1) for r in regions]
    host_flat = [m.view.reshape(-1) for m in host.mirrors]
    def contiguous(to_host: bool) -> None:
        left = total
        for d, h in zip(dev_flat, host_flat):
            n = min(left, d.numel())
            (h[:n].copy_(d[:n], non_blocking=True) if to_host else d[:n].copy_(h[:n], non_blocking=True))
            left -= n
            if left <= 0:
                break
    gen = torch.Generator().manual_seed(0)
    if ids_kind == "random":
        src = torch.randperm(pool, generator=gen)[:num_blocks]
        dst = torch.randperm(pool, generator=gen)[:num_blocks]
    else:
        src = torch.arange(num_blocks)
        dst = torch.arange(pool - num_blocks, pool)
    for direction in (Direction.STORE, Direction.LOAD):
        to_host = direction is Direction.STORE
        for name, backend in backends.items():
            counter = [0]
            def once() -> None:
                counter[0] += 1
                backend.submit(direction=direction, event_id=counter[0], src_block_ids=src, dst_block_ids=dst)
                backend.flush(60)
                for outcome in backend.poll():
                    if not outcome.ok:
                        raise RuntimeError(f"{name}: copy failed: {outcome.error}")
            ref, t = _best_pair(lambda: contiguous(to_host), once, args.repeats, device)
            rows.append(Row(case=case, block_bytes=block_bytes, num_blocks=num_blocks, ids=ids_kind,
                            direction=direction.value, backend=name, gbps=total / t / 1e9,
                            contiguous_gbps=total / ref / 1e9, ratio=ref / t))
    for backend in backends.values():
        backend.close()
    host.close()


def run(args: argparse.Namespace) -> int:
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device visible")
    if args.repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {args.repeats}")
    batch_bytes = (args.batch_mib or (128 if device == "cpu" else 256)) << 20
    rows: list[Row] = []
    started = time.perf_counter()
    for kib in args.block_kib:
        block = kib * KIB
        num_blocks = max(8, batch_bytes // block)
        # Pool twice the batch so random ids spread over memory that is not all cache-resident.
        caches = {"kv": torch.randint(-128, 128, (2 * num_blocks, block), dtype=torch.int8, device=device)}
        for ids_kind in ("random", "consecutive"):
            _measure(f"{kib}KiB", caches, num_blocks, args, ids_kind, rows)
        del caches
    # Mixed hybrid batch: per block 8 attention pages of 16 KiB and one 1 MiB state page.
    mixed_blocks = max(8, batch_bytes // (8 * 16 * KIB + KIB * KIB))
    caches = {f"attn{i}": torch.randint(-128, 128, (2 * mixed_blocks, 16 * KIB), dtype=torch.int8, device=device)
              for i in range(8)}
    caches["state"] = torch.randint(-128, 128, (2 * mixed_blocks, KIB * KIB), dtype=torch.int8, device=device)
    _measure("mixed", caches, mixed_blocks, args, "random", rows)
    elapsed = time.perf_counter() - started
    if args.json:
        json.dump({"device": device, "batch_bytes": batch_bytes, "repeats": args.repeats, "seconds": elapsed,
                   "target": TARGETS[device], "rows": [asdict(r) for r in rows]}, sys.stdout, indent=1)
        print()
        return 0
    print(f"copy bandwidth on {device}: {batch_bytes >> 20} MiB per batch, best of {args.repeats}; "
          f"ratio = backend / one contiguous copy of the same bytes")
    print(f"{'case':>8} {'block':>9} {'ids':>11} {'dir':>5} {'backend':>13} {'GB/s':>7} {'contig':>7} {'ratio':>6}")
    for r in rows:
        print(f"{r.case:>8} {r.block_bytes:>9} {r.ids:>11} {r.direction:>5} {r.backend:>13} {r.gbps:7.1f} "
              f"{r.contiguous_gbps:7.1f} {r.ratio:6.2f}")
    print(f"target: {TARGETS[device]}  ({elapsed:.0f} s)")
    return 0
