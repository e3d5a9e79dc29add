"""`kvtk calibrate --model NAME --out PROFILE.json`: fit the step-time model's constants on this host's live engine."""

from __future__ import annotations

import argparse
import json
import os

from toolkit.errors import BadInput


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="fit a step-time profile for this host from the live engine (use as --gpu PROFILE.json)",
        epilog="examples:\n  kvtk calibrate --out cpu.json\n  kvtk calibrate --out cpu.json --check fewshot-small:1\n"
        "  kvtk replay --gpu cpu.json --trace fewshot-small",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="tiny-qwen3-next", help="tiny model to run live (default tiny-qwen3-next)")
    parser.add_argument("--out", required=True, help="where to write the profile (JSON)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each batch shape (default 2)")
    parser.add_argument("--decode-tokens", type=int, default=16, help="output tokens per request (default 16)")
    parser.add_argument("--name", default=None, help="the profile's name (default cpu-MODEL)")
    parser.add_argument(
        "--check",
        default="",
        metavar="TRACE:CLIENTS,...",
        help="then run these traces live and dry (timed by the new profile), cold and hot, and print "
        "the dry engine's TTFT / e2e error per phase: TRACE:CLIENTS closed loop, TRACE:@SECONDS open loop "
        "(one arrival every SECONDS), e.g. fewshot-small:1,agentic-small:3,longdoc-small:@0.05",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads of the live engine (default 1: on a shared host it is the steadier measurement)",
    )
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    from toolkit.experiments.calibrate import calibrate

    if args.repeats < 1 or args.decode_tokens < 4:
        raise BadInput(f"repeats/decode-tokens: need >= 1 and >= 4, got {args.repeats}, {args.decode_tokens}")
    if not 1 <= args.threads <= (os.cpu_count() or 1):
        raise BadInput(f"threads: must be between 1 and this host's {os.cpu_count()} CPUs, got {args.threads}")
    check = parse_check(args.check)
    profile = calibrate(
        args.model,
        out=args.out,
        repeats=args.repeats,
        decode_tokens=args.decode_tokens,
        name=args.name,
        check=check,
        threads=args.threads,
    )
    if args.json:
        print(json.dumps(profile, indent=2))
        return 0
    fit, host = profile["fit"], profile["host"]
    print(
        f"host: {host['cpu_model']}, {host['cpus']} CPUs, AVX-512-BF16 {host['avx512_bf16']}, AMX "
        f"{host['amx_bf16']}, {host['intra_op_threads']} intra-op thread(s), load average "
        f"{host['load_average_1m']:.1f}"
    )
    print(
        f"fit on {fit['model']} ({fit['num_step_samples']} timed steps, {fit['num_dropped_slow']} slowed by other "
        f"tenants dropped): step = {profile['step_overhead_s'] * 1e3:.2f} ms + FLOPs / "
        f"{fit['achieved_flops_per_s']:.3g} + bytes / {fit['achieved_bytes_per_s']:.3g}; mean abs error per step "
        f"{fit['fit_mape']:.1%} (timed in {host['time_source']} seconds)"
    )
    for s in fit["samples"]:
        if s["kind"] == "step":
            continue
        print(
            f"  {s['kind']:<8} prompt {s['prompt_tokens']:>5} batch {s['batch']:>2}: measured "
            f"{s['measured_s'] * 1e3:8.1f} ms, fitted {s['predicted_s'] * 1e3:8.1f} ms"
        )
    for row in profile.get("check", []):
        gap = row.get("interarrival_s")
        mode = f"@{gap:g}s" if gap else f"x{row['concurrency']}"
        print(
            f"  check {row['trace']} {mode} {row['phase']:<4}: dry vs live TTFT error "
            f"{row['ttft_mape']:.1%} (target <= 15%), e2e {row['e2e_mape']:.1%} (target <= 10%), median request "
            f"{row['ttft_median_ape']:.1%} / {row['e2e_median_ape']:.1%}; hit tokens "
            f"{row['dry_hit_tokens']:,} dry, {row['live_hit_tokens']:,} live"
        )
    print(f"profile: {args.out} (kvtk replay --engine dry --model {fit['model']} --gpu {args.out})")
    return 0


def parse_check(text: str) -> tuple[tuple, ...]:
    """`--check`'s comma list: TRACE:CLIENTS (closed loop, 1-64 clients) or TRACE:@SECONDS (open loop)."""
    check: list[tuple] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        trace, _, mode = part.rpartition(":") if ":" in part else (part, "", "1")
        try:
            if mode.startswith("@"):  # open loop: one arrival every GAP seconds
                gap = float(mode[1:])
                if not 0 < gap < 3600:
                    raise ValueError
                check.append((trace, None, gap))
            else:
                clients = int(mode)
                if not 1 <= clients <= 64:
                    raise ValueError
                check.append((trace, clients))
        except ValueError:
            raise BadInput(f"check: {part!r} is not TRACE:CLIENTS (1-64) or TRACE:@SECONDS (open loop)") from None
    return tuple(check)
