"""`kvtk doctor`: the vLLM build, platform, model runner, Triton and torch here, and whether the version matrix
tests that combination (exit code 1 when it does not)."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="which vLLM, platform, model runner, Triton and torch are installed, and whether they are tested",
        description=__doc__,
        epilog="examples:\n  kvtk doctor\n  kvtk doctor --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from toolkit.vllm.doctor import diagnose

    found = diagnose()
    if args.json:
        print(json.dumps(found.as_dict(), indent=2))
    else:
        for key, value in found.as_dict().items():
            if value:
                print(f"{key.replace('_', ' '):>13}: {value}")
    return 0 if found.tested else 1
