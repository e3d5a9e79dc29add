"""`kvtk models {ensure,list}`: tiny models with seeded random weights, generated once into .cache/models."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="generate or list the tiny models (seeded random weights)",
        epilog="examples:\n  kvtk models list\n  kvtk models ensure tiny-qwen3-next",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True)
    ensure = actions.add_parser(
        "ensure",
        help="generate missing weights (idempotent; seconds when present)",
        epilog="examples:\n  kvtk models ensure\n  kvtk models ensure tiny-qwen3-next --quiet",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ensure.add_argument("names", nargs="*", metavar="NAME", help="models to ensure (default: the default set)")
    ensure.add_argument("--quiet", action="store_true", help="print nothing when all weights exist")
    ensure.set_defaults(func=run_ensure)
    listing = actions.add_parser(
        "list",
        help="list the known models and whether their weights exist",
        epilog="examples:\n  kvtk models list\n  kvtk models list --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=run_list)


def run_ensure(args) -> int:
    from toolkit.models.registry import ensure_model, is_ready, list_models, load_entry, model_dir

    names = args.names or [entry.name for entry in list_models() if entry.default]
    for name in names:
        load_entry(name)  # unknown names fail before any generation starts
    for name in names:
        existed = is_ready(model_dir(name))
        path = ensure_model(name, quiet=args.quiet)
        if not args.quiet or not existed:
            print(f"models: {name}: {'present' if existed else 'generated'} at {path}")
    return 0


def run_list(args) -> int:
    from toolkit.models.registry import is_ready, list_models, model_dir

    rows = []
    for entry in list_models():
        path = model_dir(entry.name)
        rows.append(
            {
                "name": entry.name,
                "architecture": entry.architecture,
                "default": entry.default,
                "ready": is_ready(path),
                "path": str(path),
                "description": entry.description,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        mark = "ready" if row["ready"] else "missing"
        print(f"{row['name']:<22} {row['architecture']:<24} {mark:<8} {row['description']}")
    return 0
