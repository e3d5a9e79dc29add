"""`kvtk` entry point: dispatches to sub-command modules. Bad input (`toolkit.errors.BadInput`, or a named file that
cannot be read) becomes one line and exit code 2; a run that could not finish (`RunFailed`: a stalled scheduler or
server, a refused reset) one line and exit code 1; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import importlib
import sys

from toolkit.errors import BadInput, RunFailed

# Sub-command modules, each with `register(subparsers)`; they import heavy packages only when run.
SUBCOMMAND_MODULES = (
    "toolkit.cli.geometry",
    "toolkit.cli.models",
    "toolkit.cli.bench",
    "toolkit.cli.replay",
    "toolkit.cli.compare",
    "toolkit.cli.size",
    "toolkit.cli.notebooks",
    "toolkit.cli.demo",
    "toolkit.cli.soak",
    "toolkit.cli.sweep",
    "toolkit.cli.serve",
    "toolkit.cli.calibrate",
    "toolkit.cli.docs",
    "toolkit.cli.doctor",
)

EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvtk", description="CPU-tier KV-cache offload toolkit for hybrid LLMs")
    parser.add_argument("--version", action="version", version=f"kvtk {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # a sub-command not built yet
            raise
        module.register(subparsers)
    return parser


def version() -> str:
    """The installed distribution's version (the package's own where it runs from a source tree)."""
    from importlib import metadata

    try:
        return metadata.version("hybrid-kv-toolkit")
    except metadata.PackageNotFoundError:
        from toolkit import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    from toolkit.cli.aliases import rewrite_command_line

    parser = build_parser()
    argv = rewrite_command_line(parser, sys.argv[1:] if argv is None else list(argv))
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_extra_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra_args = extra
    try:
        return int(args.func(args) or 0)
    except BAD_INPUT as exc:
        print(f"kvtk {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RunFailed as exc:
        print(f"kvtk {args.command}: failed: {one_line(exc)}", file=sys.stderr)
        return EXIT_RUN_FAILED


# What bad input raises (docs/inputs.md): `BadInput` where the input is checked, and the errors of opening a file the
# user named. A plain ValueError is not here: raised deep in the code it is a bug and keeps its traceback.
BAD_INPUT = (BadInput, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def one_line(exc: BaseException) -> str:
    """The error as one line: a message that spans lines (YAML's, a nested cause) is joined with '; '."""
    text = "; ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text += f": {exc.filename}"
    return text or type(exc).__name__


if __name__ == "__main__":
    raise SystemExit(main())
