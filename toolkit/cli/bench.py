"""`kvtk bench {scheduler,copy}`: benchmarks that print numbers (never timed tests)."""

from __future__ import annotations

import importlib

# target name -> module with `add_arguments(parser)` and `run(args) -> int`
BENCH_MODULES = {
    "scheduler": "toolkit.bench.scheduler",
    "copy": "toolkit.bench.copy",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print its numbers")
    targets = parser.add_subparsers(dest="target", required=True)
    for target, module_name in BENCH_MODULES.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        sub = targets.add_parser(target, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None)
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
