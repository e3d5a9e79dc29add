"""`kvtk bench {scheduler,copy,...}`: benchmarks that print numbers (never timed tests).

Each target lives in a module with `add_arguments(parser)` and `run(args) -> int`. The module is imported only when
its target runs, so `kvtk` stays quick and the copy benchmark can set torch's threading environment before torch
loads.
"""

from __future__ import annotations

import argparse
import importlib
import os

# target name -> (module, one-line help)
BENCH_MODULES = {
    "scheduler": ("toolkit.bench.scheduler", "scheduler-side cost per step and per lookup (core, or vs vLLM)"),
    "dry": ("toolkit.bench.dry", "a whole Mooncake trace through the dry engine: wall time, peak RSS, growth"),
    "dry-vs-live": (
        "toolkit.bench.dry_vs_live",
        "one trace live and dry (this host's calibrated profile) in every arrival mode: TTFT / e2e error",
    ),
    "tiers": (
        "toolkit.bench.tiers",
        "the disk tier's read/write rate vs the same file system's raw O_DIRECT, per block size and queue depth",
    ),
    "hints": (
        "toolkit.bench.hints",
        "KV-hint retention (oracle, TTL) vs LRU, SLRU and Belady on session traffic: CPU-tier tokens, TTFT",
    ),
    "copy": ("toolkit.bench.copy", "block copy bandwidth per backend and block size, vs one contiguous copy"),
    "dma-shape": (
        "toolkit.bench.dma_shape",
        "CUDA: one batched-memcpy call's descriptors per call, access order and flags vs its bandwidth",
    ),
    "serve": (
        "toolkit.bench.serve",
        "vLLM's own `vllm bench serve` against a server per variant (toolkit, "
        "SimpleCPU, no offload): TTFT, throughput, CPU-tier tokens, cold and hot",
    ),
    "sweep": ("toolkit.bench.sweep", "a grid of dry cells on a local Ray: wall time with --max-parallel 1 vs 2"),
    "versions": (
        "toolkit.bench.versions",
        "the installed vLLM's SimpleCPU vs the toolkit's settings on the CPU-pressure workload: hits, reuse",
    ),
}

# Each target's --help ends with these (the commands the docs and results pages ran).
BENCH_EXAMPLES = {
    "scheduler": (
        "kvtk bench scheduler",
        "kvtk bench scheduler --statistic median --repeats 3",
        "kvtk bench scheduler --core-only --json",
        "kvtk bench scheduler --instructions --max-tokens 4 --sweep-max-tokens ''",
    ),
    "dry": (
        "kvtk bench dry --trace mooncake:PATH",
        "kvtk bench dry --check-published",
        "kvtk bench dry --trace mooncake:PATH --json",
    ),
    "dry-vs-live": (
        "kvtk bench dry-vs-live",
        "kvtk bench dry-vs-live --modes sequential,concurrency:2,open:0.3 --live-repeats 2",
    ),
    "tiers": (
        "kvtk bench tiers --dir /mnt/nvme/kvtk",
        "kvtk bench tiers --tier shared --mib 64 --repeats 3 --queue-depths 1,4,16",
    ),
    "hints": ("kvtk bench hints", "kvtk bench hints --model qwen3-next-80b-a3b --tp 4 --json"),
    "copy": (
        "kvtk bench copy",
        "kvtk bench copy --device cuda --json",
        "kvtk bench copy --device cuda --block-kib 4 16 64 256 --block-counts 256 1024 4096 65536",
    ),
    "dma-shape": (
        "kvtk bench dma-shape",
        "kvtk bench dma-shape --orders any --flags overlap --chunks 64 256 1024 8192 all --json",
    ),
    "serve": (
        "kvtk bench serve",
        "kvtk bench serve --variants toolkit,simplecpu,none --datasets prefix_repetition --json",
    ),
    "sweep": ("kvtk bench sweep", "kvtk bench sweep --serial --json"),
    "versions": ("kvtk bench versions", ".venv-vllm-0.33/bin/kvtk bench versions --json"),
}

# Idle OpenMP workers that spin after each torch op starve the copy threads on small machines (measured on 2 cores:
# 4 KiB random copies fell from 0.6 to 0.04 of the contiguous rate). Only the copy benchmark opts in.
BENCH_ENVIRONMENT = {"copy": {"OMP_WAIT_POLICY": "PASSIVE"}}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="run a benchmark and print its numbers",
        epilog="examples:\n  kvtk bench scheduler\n  kvtk bench dry --help\n  kvtk bench copy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    targets = parser.add_subparsers(dest="target", required=True)
    for target, (_, help_text) in BENCH_MODULES.items():
        # The target's own parser (built at run time) reads the remaining arguments, --help included.
        sub = targets.add_parser(target, help=help_text, add_help=False)
        sub.set_defaults(func=run, accepts_extra_args=True)


def run(args: argparse.Namespace) -> int:
    # kvtk's own process, before the benchmark imports vLLM: set for its life on purpose (read at vLLM's import).
    for name, value in BENCH_ENVIRONMENT.get(args.target, {}).items():
        os.environ.setdefault(name, value)
    module_name = BENCH_MODULES[args.target][0]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(
        prog=f"kvtk bench {args.target}",
        description=module.__doc__,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in BENCH_EXAMPLES[args.target]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    from toolkit.cli.aliases import rewrite_old_options

    return module.run(parser.parse_args(rewrite_old_options(parser, args.extra_args, parser.prog)))
