"""`kvtk docs {config,results,figures}`: documentation generated from the code and from run folders (toolkit/docs)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:  # argparse's _SubParsersAction (private type)
    parser = subparsers.add_parser(
        "docs",
        help="generate the connector's config table, a dated results page or the README's figures",
        epilog="examples:\n  kvtk docs config --check\n"
        "  kvtk docs results runs/RUN_A runs/RUN_B --out docs/results/2026-12-01-NAME.md\n"
        "  kvtk docs figures                  (the README's figures from a run's and a grid's reports)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True)
    config = actions.add_parser(
        "config",
        help="write the connector config table (from toolkit/vllm/config.py) into docs/connector.md",
        epilog="examples:\n  kvtk docs config\n  kvtk docs config --check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config.add_argument("--check", action="store_true", help="only compare; exit 1 when the committed table differs")
    config.add_argument("--doc", type=Path, default=None, help="the page holding the markers (docs/connector.md)")
    config.set_defaults(func=run_config)
    results = actions.add_parser(
        "results",
        help="render run folders (summary.json, params.json) as a results page",
        epilog="examples:\n  kvtk docs results runs/RUN --out docs/results/2026-12-03-NAME.md --title 'What it shows'\n"
        "  kvtk docs results runs/RUN_A runs/RUN_B --out docs/results/2026-12-03-NAME.md --force",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    results.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_FOLDER")
    results.add_argument("--out", type=Path, required=True, help="the page, e.g. docs/results/2026-12-01-NAME.md")
    results.add_argument("--title", default=None, help="the page's title (default: the file name)")
    results.add_argument("--force", action="store_true", help="overwrite an existing page")
    results.set_defaults(func=run_results)
    from toolkit.cli.docs_figures import add_parser

    add_parser(actions)


def run_config(args: argparse.Namespace) -> int:
    from toolkit.docs.config_table import DEFAULT_DOC, update

    doc = args.doc or DEFAULT_DOC
    same = update(doc, check=args.check)
    if args.check:
        print(
            f"docs config: {doc}: {'up to date' if same else 'differs from toolkit/vllm/config.py; run kvtk docs config'}"
        )
        return 0 if same else 1
    print(f"docs config: {doc}: {'unchanged' if same else 'table regenerated'}")
    return 0


def run_results(args: argparse.Namespace) -> int:
    from toolkit.docs.results_page import write_page

    path = write_page(args.run_dirs, args.out, title=args.title, force=args.force)
    print(f"docs results: wrote {path}")
    return 0
