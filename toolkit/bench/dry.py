"""Dry-engine benchmark: a whole Mooncake trace through the dry engine (one variant, cold), its cost and growth.

Each size (`--sizes 1000,all`: the trace's first N requests) runs in a fresh child process, so the peak resident
memory (`ru_maxrss` of that child) and the wall time are that run's alone. A run: load the trace
(streamed), the oracle and Belady bounds over it (at the engine's hash unit
and scheduler block), then every request through vLLM's real scheduler and KV cache manager with the toolkit
connector (fine-grained, slru), timed on the virtual clock by the step-time model of `--model` on `--gpu` at `--tp`.

Device KV budget per rank and hash unit: `--device-gib` and `--prefix-match-unit`, else kvtk replay's defaults:
90% of the `--gpu`'s memory less the rank's share of the bf16 weights and 6 GiB
(activations, CUDA graphs), and the largest unit up to 16 tokens that allows fine-grained hits. Growth: wall time per request and per prompt token, largest size over the
smallest (1.0 = linear).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from toolkit.errors import BadInput

DEFAULT_TRACE = str(
    Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        default=DEFAULT_TRACE,
        help="Mooncake (or kvtk) trace (default: the FAST'25 synthetic trace in ../shared/traces/mooncake/)",
    )
    parser.add_argument("--sizes", default="1000,all", help="request counts, comma separated; 'all' = whole trace")
    parser.add_argument("--model", default="qwen3-next-80b-a3b", help="model preset (geometry and step times)")
    parser.add_argument("--gpu", default="h200", help="step-time GPU profile (default h200)")
    parser.add_argument("--tp", type=int, default=4, help="tensor parallel size for the step times (default 4)")
    parser.add_argument("--cpu-gib", type=float, default=8.0, help="CPU tier budget (default 8 GiB)")
    parser.add_argument(
        "--device-gib",
        type=float,
        default=None,
        help="KV-cache GiB per rank (default: a --gpu-sized device less the weights, see below)",
    )
    parser.add_argument("--device-blocks", type=int, default=None, help="device KV blocks (overrides --device-gib)")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="vLLM max_num_seqs (default 64)")
    parser.add_argument("--window", type=int, default=256, help="requests in flight at most (default 256)")
    parser.add_argument(
        "--prefix-match-unit",
        type=int,
        default=None,
        help="vLLM hash unit; must divide the hybrid block (272 for Qwen3-Next at TP4 on CUDA; default: kvtk "
        "replay's, the largest unit up to 16 that allows fine-grained hits: 16 there; 0: vLLM's, the whole block)",
    )
    parser.add_argument(
        "--headline",
        action="store_true",
        help="the published table instead (docs/results/2026-12-01-mooncake.md): CPU tier 0 / 128 / 512 GiB x toolkit, simplecpu, "
        "no_fine_grained on the largest of --sizes",
    )
    parser.add_argument(
        "--cpu-tiers",
        default="0,128,512",
        help="--headline: CPU tier sizes in GiB, comma separated (default 0,128,512)",
    )
    parser.add_argument("--variant", default="toolkit", choices=VARIANTS, help="the variant (default toolkit)")
    parser.add_argument(
        "--step-by-step",
        action="store_true",
        help="call vLLM's scheduler for every engine step (the reference; default: quiet decode "
        "stretches advanced in one go, same answers)",
    )
    parser.add_argument(
        "--check-published",
        action="store_true",
        help="instead: the dry engine against published serving runs (the runs listed in docs/engines.md)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)


VARIANTS = ("toolkit", "simplecpu", "no_fine_grained", "no_offload", "fine_equal_priority")
HEADLINE_VARIANTS = ("toolkit", "simplecpu", "no_fine_grained", "fine_equal_priority")


def _sizes(text: str, total: int) -> list[int]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part == "all":
            out.append(total)
        else:
            try:
                n = int(part)
            except ValueError:
                raise BadInput(f"sizes: {part!r} is not a request count or 'all'") from None
            if n < 1:
                raise BadInput(f"sizes: must be >= 1, got {n}")
            out.append(min(n, total))
    if not out:
        raise BadInput("sizes: give at least one size")
    return sorted(set(out))


def _run_size(args: argparse.Namespace, size: int, *, variant: str | None = None, cpu_gib: float | None = None) -> dict:
    variant = variant or args.variant
    cpu_gib = args.cpu_gib if cpu_gib is None else cpu_gib
    argv = [
        sys.executable,
        "-m",
        "toolkit.cli.main",
        "bench",
        "dry",
        "--child",
        str(size),
        "--trace",
        args.trace,
        "--model",
        args.model,
        "--gpu",
        args.gpu,
        "--tp",
        str(args.tp),
        "--cpu-gib",
        str(cpu_gib),
        "--variant",
        variant,
        *(["--step-by-step"] if args.step_by_step else []),
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--window",
        str(args.window),
        "--prefix-match-unit",
        str(args.prefix_match_unit),
    ]
    if args.device_blocks:
        argv += ["--device-blocks", str(args.device_blocks)]
    if args.device_gib:
        argv += ["--device-gib", str(args.device_gib)]
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        raise RuntimeError(f"bench dry: the run of {size} requests failed (exit {child.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    # CPU seconds too: on a shared machine the wall time includes waiting for the other tenants.
    result.update(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime, peak_rss_bytes=usage.ru_maxrss * 1024)
    return result


def shared_defaults(args: argparse.Namespace) -> None:
    """The model by its preset name (a Hugging Face id is an alias) and kvtk replay's default hash unit for it
    (`experiments.defaults`, the one source; the device cache per rank comes from there too, `dry_child.py`)."""
    from toolkit.experiments.config import default_prefix_match_unit
    from toolkit.models.names import resolve_model_name

    args.model = resolve_model_name(args.model)
    if args.prefix_match_unit is None:
        args.prefix_match_unit = default_prefix_match_unit(args.model, args.tp) or 0


def run(args: argparse.Namespace) -> int:
    shared_defaults(args)
    if args.child is not None:
        from toolkit.bench.dry_child import run_child

        print(json.dumps(run_child(args)))
        return 0
    if args.check_published:
        from toolkit.bench.published import check_published

        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # before vLLM's import, which reads it: stays set
        return check_published(json_out=args.json)
    from toolkit.workloads.resolve import resolve_trace

    total = len(resolve_trace(args.trace).requests)
    if args.headline:
        return run_headline(args, _sizes(args.sizes, total)[-1])
    rows = [_run_size(args, size) for size in _sizes(args.sizes, total)]
    first, last = rows[0], rows[-1]
    growth = {  # CPU seconds, not wall: other tenants' load would bend the wall-time ratio
        "per_request": (last["cpu_s"] / last["requests"]) / (first["cpu_s"] / first["requests"]),
        "per_prompt_token": (last["cpu_s"] / last["prompt_tokens"]) / (first["cpu_s"] / first["prompt_tokens"]),
    }
    if args.json:
        print(json.dumps({"trace": args.trace, "runs": rows, "growth": growth}, indent=2))
        return 0
    print(f"trace {args.trace}: {total} requests; one variant (toolkit, fine-grained, slru), cold phase")
    print(
        f"geometry {last['geometry']} (scheduler block {last['scheduler_block_tokens']}, hash unit "
        f"{last['hash_block_tokens']}, {last['device_blocks']} device blocks, {last['cpu_blocks']} CPU-tier blocks "
        f"= {args.cpu_gib:g} GiB); step times {args.model} on {args.gpu} TP{args.tp}"
    )
    print(
        f"{'requests':>9}{'prompt tok':>13}{'steps':>9}{'wall s':>9}{'cpu s':>9}{'engine s':>9}{'bounds s':>9}"
        f"{'peak RSS':>10}{'local':>12}{'cpu-tier':>12}{'belady':>12}{'ttft p50':>10}{'ttft p99':>10}"
    )
    for r in rows:
        print(
            f"{r['requests']:>9}{r['prompt_tokens']:>13,}{r['steps']:>9}{r['wall_s']:>9.1f}{r['cpu_s']:>9.1f}"
            f"{r['engine_s']:>9.1f}"
            f"{r['bounds_s']:>9.1f}{r['peak_rss_bytes'] / 2**30:>8.2f}Gi{r['local_hit_tokens']:>12,}"
            f"{r['external_hit_tokens']:>12,}"
            f"{r['belady_hit_tokens']:>12,}{r['ttft_p50_s'] * 1e3:>8.0f}ms{r['ttft_p99_s'] * 1e3:>8.0f}ms"
        )
    for r in rows:
        print(speed_line(r))
    print(
        f"growth from {first['requests']} to {last['requests']} requests: CPU seconds per request x"
        f"{growth['per_request']:.2f}, per prompt token x{growth['per_prompt_token']:.2f} (1.00 = linear)"
    )
    return 0


def speed_line(r: dict) -> str:
    """The run's cost in one line: simulated requests per wall second, where the time went, peak memory."""
    mode = "step by step" if r.get("step_by_step") else f"{r.get('skipped_steps', 0):,} decode steps skipped"
    return (
        f"speed: {r['requests']:,} requests in {r['wall_s']:.1f} s wall ({r['cpu_s']:.1f} s CPU; set-up "
        f"{r['setup_s']:.1f} s, bounds {r['bounds_s']:.1f} s, engine {r['engine_s']:.1f} s): "
        f"{r['requests'] / r['wall_s']:.0f} simulated requests/s, {r['steps'] / r['engine_s']:,.0f} engine "
        f"steps/s ({r['steps']:,} steps, {mode}), peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB"
    )


def run_headline(args: argparse.Namespace, size: int) -> int:
    """CPU-tier hit tokens against the oracle and Belady, and modelled TTFT, per CPU tier size and variant."""
    rows = []
    try:
        tiers = [float(t) for t in args.cpu_tiers.split(",") if t.strip()]
    except ValueError:
        raise BadInput(f"cpu-tiers: {args.cpu_tiers!r} is not a comma-separated list of GiB") from None
    for cpu_gib in tiers:
        for variant in ("no_offload",) if cpu_gib == 0 else HEADLINE_VARIANTS:
            rows.append(_run_size(args, size, variant=variant, cpu_gib=cpu_gib or 1))
    if args.json:
        print(json.dumps({"trace": args.trace, "requests": size, "runs": rows}, indent=2))
        return 0
    r0 = rows[0]
    print(
        f"{size} requests of {args.trace} ({r0['prompt_tokens']:,} prompt tokens), {args.model} at TP{args.tp} on "
        f"{args.gpu} ({r0['device_bytes_per_rank'] / 2**30:.0f} GiB KV per rank, {r0['device_blocks']} blocks), "
        f"hash unit {r0['hash_block_tokens']}, cold phase; oracle reusable {r0['oracle_reusable_tokens']:,}"
    )
    print(
        f"{'CPU tier':>9} {'variant':<16}{'local':>12}{'cpu-tier':>12}{'cpu+local':>12}{'belady':>12}"
        f"{'ttft p50':>10}{'ttft p99':>10}{'wall':>7}"
    )
    for r in rows:
        cpu = "0 GiB" if r["variant"] == "no_offload" else f"{r['cpu_gib']:g} GiB"
        belady = "" if r["variant"] == "no_offload" else f"{r['belady_hit_tokens']:,}"
        print(
            f"{cpu:>9} {r['variant']:<16}{r['local_hit_tokens']:>12,}{r['external_hit_tokens']:>12,}"
            f"{r['local_hit_tokens'] + r['external_hit_tokens']:>12,}{belady:>12}{r['ttft_p50_s'] * 1e3:>8.0f}ms"
            f"{r['ttft_p99_s'] * 1e3:>8.0f}ms{r['wall_s']:>6.0f}s"
        )
    print(
        "the toolkit's CPU tier: blocks stored by source; fine-grained-only blocks (tail, handoff_fine) stored / "
        "hit at least once / evicted unused; held at the end (cached, of them fine-only unhit); tokens fine-grained "
        "hits added"
    )
    for r in rows:
        tier = r.get("tier") or {}
        if not tier:
            continue
        fine = tier.get("fine_only_blocks", {})
        stored = ", ".join(f"{k} {v:,}" for k, v in sorted(tier.get("stored_blocks_by_source", {}).items()))
        print(
            f"{r['cpu_gib']:>6g} GiB {r['variant']:<16} stored: {stored}; fine-only {fine.get('stored', 0):,} / "
            f"{fine.get('promoted', 0):,} / {fine.get('evicted_unused', 0):,}; end {tier['cached_blocks_end']:,} "
            f"({tier['low_blocks_end']:,}); +{tier['fine_grained_hit_tokens']:,} tokens"
        )
    return 0
