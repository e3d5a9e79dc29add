"""`kvtk bench tiers --tier shared`: the shared tier's put/get rate and per-operation latency (issue 37).

Against a store this command starts on loopback (`mooncake_master` + a store process, toolkit/tiers/shared/
server.py) or an existing one (`--store mooncake://HOST:PORT`). Per block size: the latency of one operation at a
time (p50/p99, submit to completion, through the tier: framing, checksum, a worker thread, the store's TCP path)
and the raw client's one-at-a-time rate (no framing, no checksum, no thread: what the tier costs), then the rate
at each queue depth. Payload bytes only; best of `--repeats`. Loopback TCP on a small host: the numbers are the
store path's own cost, not a network's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass

from toolkit.bench.tier_drive import bench_identity, drive
from toolkit.errors import BadInput
from toolkit.limits import check_int
from toolkit.tiers.shared import Refused, SharedPool, SharedTier, SharedTierConfig, StoreServer, parse_store_url
from toolkit.tiers.shared.backend import MooncakeClient
from toolkit.tiers.shared.workers import Staging

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class SharedRow:
    op: str  # "put" | "get"
    block_kib: int
    queue_depth: int
    tier_gbps: float
    raw_gbps: float | None  # the bare client, one call at a time (QD 1 rows only)
    tier_over_raw: float | None  # median over repeats of tier / raw measured back to back (QD 1 rows only)
    p50_ms: float | None  # one operation at a time (QD 1 rows only)
    p99_ms: float | None
    refused_full: int


def _drive(tier: SharedTier, keys: list[bytes], buffers: list[bytearray], *, put: bool) -> tuple[float, int]:
    """(payload bytes per second, writes refused as full) moving `keys` with up to len(buffers) in flight."""
    try:
        return drive(tier, keys, buffers, write=put, poll_timeout_s=1.0, what="shared tier")
    except RuntimeError as exc:  # say why the store refused or failed: down, paused, full
        raise RuntimeError(f"{exc}: {tier.down_reason} {tier.stats()}") from exc


def _latencies_ms(tier: SharedTier, keys: list[bytes], buf: bytearray, *, put: bool) -> list[float]:
    out = []
    for key in keys:
        start = time.perf_counter()
        if isinstance(tier.submit_write("b", key, buf) if put else tier.submit_read("b", key, buf), Refused):
            continue
        (done,) = tier.wait_all()
        if done.ok:
            out.append(1e3 * (time.perf_counter() - start))
    return out


class _Raw:
    """The bare client, one call at a time from one registered buffer: no header, checksum or thread."""

    def __init__(self, master: str, block_bytes: int, tag: str) -> None:
        self.client, rc = MooncakeClient.setup(master, "127.0.0.1", 16 * MIB)
        if rc != 0:
            raise RuntimeError(f"bench: raw client setup returned {rc}")
        self.block_bytes, self.tag = block_bytes, tag
        self.staging = Staging(block_bytes)
        self.staging.view[:] = os.urandom(block_bytes)
        self.client.register(self.staging.address, block_bytes)
        self.rates(4, "warm")  # the first calls open the connections to the master and the store process

    def rates(self, ops: int, rep: str) -> tuple[float, float]:
        """(put, get) payload bytes per second over `ops` values."""
        keys = [f"raw/{self.tag}/{rep}/{n}" for n in range(ops)]
        address, size = self.staging.address, self.block_bytes
        start = time.perf_counter()
        ok = sum(self.client.put_from(key, address, size) == 0 for key in keys)
        put = ok * size / (time.perf_counter() - start)
        start = time.perf_counter()
        got = sum(self.client.get_into(key, address, size) == size for key in keys[:ok])
        return put, got * size / (time.perf_counter() - start)


def _cells(master: str, kib: int, depths: list[int], args: argparse.Namespace) -> list[SharedRow]:
    block = kib * 1024
    ops = max(8, args.mib * MIB // block)
    rows: list[SharedRow] = []
    raw = _Raw(master, block, str(kib)) if 1 in depths else None
    try:
        for qd in depths:
            rows.extend(_depth(master, kib, qd, ops, raw if qd == 1 else None, args.repeats))
    finally:
        if raw is not None:
            raw.client.close()
    return rows


def _depth(master: str, kib: int, qd: int, ops: int, raw: _Raw | None, repeats: int) -> list[SharedRow]:
    """One queue depth: latency probe and raw pairing at QD 1; raw and tier alternate within each repeat, so a
    loaded minute of the host hits both (the ratio is the median of the per-repeat ratios)."""
    block = kib * 1024
    config = SharedTierConfig(master=master, identity=bench_identity(block), pools=(SharedPool("b", block),),
                              queue_depth=qd, op_timeout_s=10.0)  # fmt: skip
    tier = SharedTier.connect(config)
    if not tier.available:
        raise RuntimeError(f"bench: cannot connect to the store: {tier.down_reason}")
    rates: dict[str, list[float]] = {"put": [], "get": [], "raw put": [], "raw get": []}
    full = {"put": 0, "get": 0}
    with tier:
        buffers = [bytearray(os.urandom(block)) for _ in range(2 * qd)]
        warm = [b"warm%d-%d-%d" % (kib, qd, n) for n in range(2 * qd)]  # connections open on first use
        _drive(tier, warm, buffers, put=True)
        _drive(tier, warm, buffers, put=False)
        lat: dict[str, list[float]] = {}
        if raw is not None:
            probe = [b"lat%d-%d" % (kib, n) for n in range(min(ops, 64))]
            lat = {op: _latencies_ms(tier, probe, buffers[0], put=op == "put") for op in ("put", "get")}
        for rep in range(repeats):
            if raw is not None:
                raw_put, raw_get = raw.rates(ops, str(rep))
                rates["raw put"].append(raw_put)
                rates["raw get"].append(raw_get)
            keys = [b"q%d-%d-%d-%d" % (kib, qd, rep, n) for n in range(ops)]
            for op in ("put", "get"):
                rate, refused = _drive(tier, keys, buffers, put=op == "put")
                rates[op].append(rate)
                full[op] += refused
    rows = []
    for op in ("put", "get"):
        paired = [t / r for t, r in zip(rates[op], rates[f"raw {op}"])]
        rows.append(SharedRow(
            op, kib, qd, max(rates[op]) / 1e9, max(rates[f"raw {op}"]) / 1e9 if paired else None,
            statistics.median(paired) if paired else None,
            statistics.median(lat[op]) if lat.get(op) else None,
            _quantile(lat[op], 0.99) if lat.get(op) else None, full[op],
        ))  # fmt: skip
    return rows


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace, blocks: list[int], depths: list[int]) -> int:
    check_int(args.store_mib, "--store-mib", 16, 1 << 20)
    master = parse_store_url(args.store) if args.store else ""
    needed_mib = (len(depths) + 1) * args.repeats * args.mib + 64 * max(blocks) // 1024 + 32
    if not args.store and args.store_mib < needed_mib:
        raise BadInput(f"--store-mib: {args.store_mib} MiB is less than the {needed_mib} MiB one block size's puts "
                       f"hold ((queue depths + 1) x --repeats x --mib + the latency probe); give more or lower --mib")  # fmt: skip
    started = time.perf_counter()
    rows: list[SharedRow] = []
    for kib in blocks:  # a fresh store per block size when we start it: puts of one size never fill the next's
        if master:
            rows.extend(_cells(master, kib, depths, args))
            continue
        with StoreServer(args.store_mib * MIB) as server:
            rows.extend(_cells(server.master, kib, depths, args))
    host = {
        "host": f"{os.cpu_count()}-vCPU {_cpu()}, {platform.system()} {platform.release()}",
        "store": f"Mooncake Store ({_version()}), TCP, {args.store or 'loopback, started by this command'}",
        "load_average": "{:.1f} {:.1f} {:.1f} (1, 5, 15 min, at the end)".format(*os.getloadavg()),
    }
    if args.json:
        print(json.dumps({"host": host, "rows": [asdict(r) for r in rows]}, indent=1))
        return 0
    for key, value in host.items():
        print(f"{key}: {value}")
    print(f"\n{'op':<5}{'block':>8}{'QD':>4}{'tier GB/s':>11}{'raw client GB/s':>17}{'tier/raw':>10}{'p50 ms':>8}"
          f"{'p99 ms':>8}{'full':>6}")  # fmt: skip
    for r in rows:
        block = f"{r.block_kib // 1024} MiB" if r.block_kib >= 1024 else f"{r.block_kib} KiB"
        raw = f"{r.raw_gbps:.2f}" if r.raw_gbps is not None else "-"
        ratio = f"{r.tier_over_raw:.2f}" if r.tier_over_raw is not None else "-"
        p50 = f"{r.p50_ms:.2f}" if r.p50_ms is not None else "-"
        p99 = f"{r.p99_ms:.2f}" if r.p99_ms is not None else "-"
        print(f"{r.op:<5}{block:>8}{r.queue_depth:>4}{r.tier_gbps:>11.2f}{raw:>17}{ratio:>10}{p50:>8}{p99:>8}"
              f"{r.refused_full:>6}")  # fmt: skip
    print(f"\n{time.perf_counter() - started:.1f} s")
    return 0


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "?"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"mooncake-transfer-engine-non-cuda {version('mooncake-transfer-engine-non-cuda')}"
    except PackageNotFoundError:
        return "not installed"
