"""Print the issue's target numbers (a benchmark, not a timed test): `python -m toolkit.experiments.targets`.

Sections: hot phase vs oracle on every workload; fine-grained vs block-aligned on few-shot; replay after pressure
vs the Belady bound (dry); dry-engine time at growing request counts; optionally (`--live`) live TTFT and output identity
on the demo model. `--sections` picks the dry ones, e.g. `--sections= --live` for the live check alone.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

# The demo's trace: distinct 2500-token documents, so every cold request is a full prefill.
from toolkit.experiments.demo import DEMO_TRACE as LIVE_TTFT_TRACE


def _row(summary: dict[str, Any], variant: str, phase: str) -> dict[str, Any]:
    row: dict[str, Any] = next(p for p in summary["phases"] if p["variant"] == variant and p["phase"] == phase)
    return row


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # this script's own process, before vLLM's import: stays set
    parser = argparse.ArgumentParser()
    parser.add_argument("--connector", default=None, help="main connector (default: toolkit if exported)")
    parser.add_argument("--scale", default="1000,3000,10000", help="few-shot request counts for the dry timing")
    parser.add_argument("--live", action="store_true", help="also run the live demo-model TTFT check")
    parser.add_argument(
        "--sections",
        default="hot,fine,pressure,scale",
        help="comma-separated dry sections to run: hot, fine, pressure, scale (empty: none)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="parent of the run folders (default: a new runs/targets/<time>; must be new or empty)",
    )
    args = parser.parse_args(argv)
    # Not a fixed /tmp name another user could create first: a new folder of ours, refused if it holds anything.
    from toolkit.private_fs import create_run_dir, unique_dir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out = str(create_run_dir(args.out) if args.out else unique_dir("runs/targets", stamp))
    sections = {x for x in args.sections.split(",") if x}

    connector = args.connector
    if connector is None:
        import toolkit.vllm as tv

        connector = "toolkit" if hasattr(tv, "HybridOffloadConnector") else "simplecpu"
    print(f"main connector: {connector}")
    if "hot" in sections:
        _hot(args, connector)
    if "fine" in sections:
        _fine(args, connector)
    if "pressure" in sections:
        _pressure(args, connector)
    if "scale" in sections:
        _scale(args, connector)
    if args.live:
        _live(args, connector)
    return 0


def _hot(args: argparse.Namespace, connector: str) -> None:
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    print("\n== hot phase, ample CPU tier: (device + CPU-tier hit tokens) / oracle   [target >= 0.98]")
    for trace in ("fewshot-small", "agentic-small", "longdoc-small"):
        s = run_experiment(
            ExperimentConfig(
                engine="dry", trace=trace, connector=connector, phases=("cold", "hot"), out=f"{args.out}/hot-{trace}"
            )
        ).summary
        hot = s["phases"][1]
        hits = hot["local_hit_tokens"] + hot["external_hit_tokens"]
        print(
            f"{trace:<16} hits {hits:>7} oracle {s['oracle_reusable_tokens']['hot']:>7} "
            f"ratio {hits / max(1, s['oracle_reusable_tokens']['hot']):.3f}"
        )


def _fine(args: argparse.Namespace, connector: str) -> None:
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    print(
        "\n== few-shot, hybrid geometry: fine-grained vs block-aligned hot CPU-tier hit tokens   [target: fine > block]"
    )
    if connector == "toolkit":
        s = run_experiment(
            ExperimentConfig(
                engine="dry",
                trace="fewshot-small",
                connector=connector,
                phases=("cold", "hot"),
                baselines=("no_fine_grained",),
                out=f"{args.out}/fine",
            )
        ).summary
        fine, block = _row(s, "toolkit", "hot"), _row(s, "no_fine_grained", "hot")
    else:  # vLLM's own: block-aligned = the default hash unit (the whole hybrid block)
        fine = run_experiment(
            ExperimentConfig(
                engine="dry", trace="fewshot-small", connector=connector, phases=("cold", "hot"), out=f"{args.out}/fine"
            )
        ).summary["phases"][1]
        block = run_experiment(
            ExperimentConfig(
                engine="dry",
                trace="fewshot-small",
                connector=connector,
                phases=("cold", "hot"),
                prefix_match_unit=None,
                out=f"{args.out}/block",
            )
        ).summary["phases"][1]
    print(f"fine-grained {fine['external_hit_tokens']}  block-aligned {block['external_hit_tokens']}")


def _pressure(args: argparse.Namespace, connector: str) -> None:
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    # Belady is a bound (both tiers' blocks as attention KV, `oracle.py`), so the ratio is at most 1; the LRU-sim is
    # vLLM's order on the tier's own model, an estimate for comparison, not a bound.
    print("\n== replay after pressure: device + CPU-tier hits / the Belady bound (dry)   [target >= 0.8]")
    for trace in ("fewshot-small", "agentic-small", "longdoc-small"):
        for eviction in ("lru", "slru") if connector == "toolkit" else ("lru",):
            s = run_experiment(
                ExperimentConfig(
                    engine="dry",
                    trace=trace,
                    connector=connector,
                    eviction=eviction,
                    out=f"{args.out}/pressure-{trace}-{eviction}",
                )
            ).summary
            rep = s["phases"][3]
            got = rep["local_hit_tokens"] + rep["external_hit_tokens"]
            bel = s["belady_hit_tokens"]["replay"]
            print(
                f"{trace:<16} {eviction:<5} replay hits {got:>7} belady {bel:>7} ratio {got / max(1, bel):.3f}"
                f"  (LRU sim {rep['lru_sim_hit_tokens']}, oracle {rep['oracle_reusable_tokens']})"
            )


def _scale(args: argparse.Namespace, connector: str) -> None:
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    print("\n== dry engine time vs few-shot requests   [target: 10^4 under 300 s]")
    for n in [int(x) for x in args.scale.split(",")]:
        t0 = time.perf_counter()
        s = run_experiment(
            ExperimentConfig(
                engine="dry",
                trace=f"fewshot:num_requests={n}",
                connector=connector,
                phases=("cold",),
                out=f"{args.out}/scale-{n}",
                progress=True,
            )
        ).summary
        wall = time.perf_counter() - t0
        print(
            f"{n:>7} requests: {wall:7.1f} s total, {s['phases'][0]['wall_s']:7.1f} s in the phase, "
            f"{1e3 * s['phases'][0]['wall_s'] / n:.2f} ms/request"
        )


def _live(args: argparse.Namespace, connector: str) -> None:
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    print("\n== live, demo model: TTFT hot / cold and output identity   [target <= 0.5x, identical]")
    s = run_experiment(
        ExperimentConfig(
            engine="live",
            model="demo-qwen3-next",
            trace=LIVE_TTFT_TRACE,
            connector=connector,
            phases=("cold", "hot", "replay"),
            negative_control=connector == "toolkit",
            out=f"{args.out}/live",
        )
    ).summary
    main_variant = s["phases"][0]["variant"]
    cold, hot, rep = (_row(s, main_variant, p) for p in ("cold", "hot", "replay"))
    print(
        f"model demo-qwen3-next (sizing: toolkit/models/README.md), trace {LIVE_TTFT_TRACE}, "
        f"hash unit {s['hash_block_tokens']}, scheduler block {s['scheduler_block_tokens']}"
    )
    c_ms, h_ms, r_ms = (1e3 * row["median_ttft_s"] for row in (cold, hot, rep))
    print(
        f"median TTFT per request: cold {c_ms:.0f} ms, hot {h_ms:.0f} ms, replay {r_ms:.0f} ms; "
        f"hot/cold ratio {h_ms / c_ms:.3f} (CPU-tier hit tokens hot {hot['external_hit_tokens']} of "
        f"{hot['prompt_tokens']})"
    )
    tol = s.get("logprob_tolerance")
    for name, row in (("hot", hot), ("replay", rep)):
        level = (
            "exact (tokens and top-1 logprobs bit-identical)"
            if row["outputs_identical"]
            else f"within tolerance {tol}"
            if row.get("within_tolerance")
            else "NOT identical"
        )
        print(
            f"{name:<7} vs cold: {level}; tokens identical {row.get('tokens_identical')}, "
            f"max |dlogprob| {row['max_abs_logprob_delta']:.3g}"
        )
    control = next((p for p in s["phases"] if p["variant"] == "corrupted_kv" and p["phase"] == "hot"), None)
    if control is not None:
        delta = control["max_abs_logprob_delta"]
        shown = "inf (non-finite logprobs)" if delta == float("inf") else f"{delta:.3g}"
        print(
            f"negative control (corrupted loads), hot vs cold: tokens identical {control.get('tokens_identical')} "
            f"({control.get('differing_output_tokens')}/{control.get('output_tokens')} output tokens differ), "
            f"max |dlogprob| {shown} vs {hot['max_abs_logprob_delta']:.3g} for the correct hot run "
            f"(tolerance {tol})"
        )


if __name__ == "__main__":
    raise SystemExit(main())
