"""How the shape of a `cuMemcpyBatchAsync` call moves its bandwidth (`kvtk bench dma-shape`, CUDA only).

The copy benchmark's grid showed host-to-device batches of many small descriptors several times slower than the
same bytes device-to-host, and slower in one call than in chunks. This separates the call's knobs, each on the
same random batch: descriptors per call (`chunk`), the load's source access order (ANY, what the toolkit and vLLM
ask for, or STREAM) and the prefer-overlap-with-compute flag. Each row also gives the CPU time spent in `submit`
(descriptor building and the driver calls), so a slow row can be told from a slow copy engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from toolkit.bench.copy import check_at_least_one
from toolkit.bench.copy_backends import VLLM_SHAPE_MAX_DESCRIPTORS
from toolkit.copy import Direction, RegionPair, allocate_host_mirrors
from toolkit.copy.cuda_backend import CudaDmaBackend
from toolkit.copy.cuda_driver import (
    MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE,
    SRC_ACCESS_ORDER_ANY,
    SRC_ACCESS_ORDER_STREAM,
)
from toolkit.copy.regions import regions_from_tensors
from toolkit.errors import BadInput

KIB = 1024
ORDERS = {"any": SRC_ACCESS_ORDER_ANY, "stream": SRC_ACCESS_ORDER_STREAM}
FLAGS = {"overlap": MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE, "none": 0}


def _time_batch(backend: CudaDmaBackend, direction: Direction, src, dst, repeats: int) -> tuple[float, float]:
    """(best seconds to completion, CPU seconds in submit on that run), after one warm-up."""
    best, submit_s = float("inf"), 0.0
    for i in range(repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        backend.submit(direction=direction, event_id=i, src_block_ids=src, dst_block_ids=dst)
        submitted = time.perf_counter()
        backend.flush(60)
        torch.cuda.synchronize()
        end = time.perf_counter()
        if not all(o.ok for o in backend.poll()):
            raise RuntimeError("copy failed")
        if i and end - start < best:
            best, submit_s = end - start, submitted - start
    return best, submit_s


def _variants(chunks, orders, flags) -> list[tuple[Direction, int | str, str, str]]:
    """(direction, chunk, order, flag) to time; stores take one order only (they always read in stream order)."""
    return [
        (direction, chunk, order, flag)
        for direction in (Direction.STORE, Direction.LOAD)
        for chunk in chunks
        for order in (orders if direction is Direction.LOAD else orders[:1])
        for flag in flags
    ]


def _time_variant(pairs, src, dst, repeats: int, direction: Direction, chunk, order: str, flag: str) -> dict:
    backend = CudaDmaBackend(
        store_pairs=pairs,
        order_after_compute=False,
        max_descriptors={"auto": None, "all": VLLM_SHAPE_MAX_DESCRIPTORS}.get(chunk, chunk),
        load_access_order=ORDERS[order],
        memcpy_flags=FLAGS[flag],
    )
    try:
        t, submit_s = _time_batch(backend, direction, src, dst, repeats)
    finally:
        backend.close()
    row_bytes = pairs[0].row_bytes
    return {
        "block_kib": row_bytes // KIB,
        "blocks": len(src),
        "direction": direction.value,
        "chunk": chunk,
        "order": order if direction is Direction.LOAD else "stream",
        "flags": flag,
        "gbps": row_bytes * len(src) / t / 1e9,
        "submit_ms": submit_s * 1e3,
        "total_ms": t * 1e3,
    }


def measure(
    block_kib: list[int],
    counts: list[int],
    chunks: list[int | str],
    repeats: int,
    cap_mib: int,
    orders=tuple(ORDERS),
    flags=tuple(FLAGS),
) -> list[dict]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for kib, count in [(k, n) for k in block_kib for n in counts if k * KIB * n <= cap_mib << 20]:
        dev = torch.randint(-128, 128, (2 * count, kib * KIB), dtype=torch.int8, device="cuda")
        regions = regions_from_tensors({"kv": dev})
        src = torch.randperm(2 * count, generator=gen)[:count]
        dst = torch.randperm(2 * count, generator=gen)[:count]
        with allocate_host_mirrors(regions, num_host_blocks=2 * count) as host:
            pairs = [RegionPair(name="kv", src=regions[0].view, dst=host.mirrors[0].view)]
            for variant in _variants(chunks, orders, flags):
                rows.append(_time_variant(pairs, src, dst, repeats, *variant))
        del dev
    return rows


def _chunk(text: str) -> int | str:
    if text in ("auto", "all"):
        return text
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, auto or all, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--block-kib", type=int, nargs="+", default=[4, 16, 64], help="block sizes in KiB")
    parser.add_argument("--blocks", type=int, nargs="+", default=[256, 4096, 65536], help="blocks per batch")
    parser.add_argument(
        "--chunks",
        type=_chunk,
        nargs="+",
        default=["auto", 8192, "all"],
        help="descriptors per call: a number, auto (the backend's default) or all (the whole batch in one call)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-mib", type=int, default=1024, help="largest batch timed (larger cells skipped)")
    parser.add_argument("--orders", nargs="+", choices=tuple(ORDERS), default=list(ORDERS), help="load access orders")
    parser.add_argument("--flags", nargs="+", choices=tuple(FLAGS), default=list(FLAGS), help="memcpy flags")
    parser.add_argument("--json", action="store_true", help="print one JSON list of rows instead of the table")


def run(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        raise BadInput("--device: no CUDA device visible (this benchmark times the CUDA driver's batched copy)")
    check_at_least_one({"--block-kib": args.block_kib, "--blocks": args.blocks})
    if args.repeats < 1 or args.max_mib < 1:
        raise BadInput(f"--repeats/--max-mib: must be >= 1, got {args.repeats}/{args.max_mib}")
    rows = measure(
        args.block_kib, args.blocks, args.chunks, args.repeats, args.max_mib, tuple(args.orders), tuple(args.flags)
    )
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(
        f"{'KiB':>5} {'blocks':>6} {'dir':>5} {'chunk':>6} {'order':>6} {'flags':>7} {'GB/s':>6} {'submit ms':>9} {'ms':>7}"
    )
    for r in rows:
        print(
            f"{r['block_kib']:>5} {r['blocks']:>6} {r['direction']:>5} {r['chunk']!s:>6} {r['order']:>6} "
            f"{r['flags']:>7} {r['gbps']:>6.1f} {r['submit_ms']:>9.2f} {r['total_ms']:>7.2f}"
        )
    return 0


if __name__ == "__main__":  # on a GPU box without an install: python -m toolkit.bench.dma_shape ...
    cli = argparse.ArgumentParser(prog="python -m toolkit.bench.dma_shape", description=__doc__)
    add_arguments(cli)
    try:
        raise SystemExit(run(cli.parse_args()))
    except BadInput as exc:
        print(f"python -m toolkit.bench.dma_shape: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
