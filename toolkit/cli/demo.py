"""`kvtk demo`: the main job of `make demo`."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run the main demonstration job")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from toolkit.cli.main import main

    print("Block geometry of every model preset (vLLM rules on CUDA, DCP 1, hash unit 16 tokens):\n")
    return main(["geometry", "--hash-block", "16"])
