"""`kvtk notebooks`: execute the notebooks with papermill into a run folder and export offline HTML reports."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "notebooks",
        help="run the notebooks (papermill) and write HTML reports",
        description=__doc__,
        epilog="examples:\n  kvtk notebooks --list\n  kvtk notebooks --smoke --only 01\n"
        "  kvtk notebooks --only 03 -p trace agentic-small --png-dir docs/figures",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="CI-sized parameters (seconds per notebook)")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="a notebook by name or number prefix (01, 04_cache_state); repeatable",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run folder (default runs/notebooks/<timestamp>); created with mode 0700"
    )
    parser.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        default=[],
        help="set a parameter; VALUE is read as JSON when it parses (1, 0.5, [1,2], true), else as a string",
    )
    parser.add_argument("--no-html", action="store_true", help="skip the HTML export")
    parser.add_argument(
        "--png",
        action="store_true",
        help="also write every figure as a PNG (plotly + kaleido + Debian's chromium or "
        "$BROWSER_PATH) into the run folder's figures/, or --png-dir",
    )
    parser.add_argument(
        "--png-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where --png writes (implies --png); e.g. docs/figures",
    )
    parser.add_argument(
        "--png-figure",
        action="append",
        metavar="STEM-NN",
        default=None,
        help="only this figure (the notebook's stem and the figure's index, 03_cold_hot_replay-01); "
        "repeatable, implies --png",
    )
    parser.add_argument("--list", action="store_true", help="list the notebooks and their parameters, run nothing")
    parser.set_defaults(func=run)


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def run(args: argparse.Namespace) -> int:
    from toolkit import notebooks_runner as runner

    if args.list:
        for path in runner.select_notebooks(args.only):
            params = runner.declared_parameters(path)
            described = ", ".join(f"{n}={p['default']}" for n, p in params.items())
            print(f"{path.stem}: {described}")
        return 0
    parameters = {name: parse_value(value) for name, value in args.parameter}
    png_dir = args.png_dir
    run_dir = args.out or runner.default_run_dir()
    if (args.png or args.png_figure) and png_dir is None:
        png_dir = Path(run_dir) / "figures"
    results = runner.run_notebooks(
        only=args.only,
        out_dir=run_dir,
        smoke=args.smoke,
        parameters=parameters,
        html=not args.no_html,
        png_dir=png_dir,
        png_only=set(args.png_figure) if args.png_figure else None,
    )
    failed = 0
    for r in results:
        status = "ok" if not r.error else f"FAILED: {r.error}"
        report = r.html if r.html else r.ipynb
        print(f"{r.name}: {status} ({r.seconds:.1f} s) -> {report}" + (f", {len(r.pngs)} PNGs" if r.pngs else ""))
        failed += bool(r.error)
    if results:
        print(f"run folder: {results[0].ipynb.parent}")
    if png_dir is not None:
        print(f"figures: {png_dir}")
    return 1 if failed else 0
