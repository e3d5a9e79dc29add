"""A plain-Python runner for the GPU test modules, for boxes that have torch and Triton but no pytest.

    python kernels/gpu_runner.py --json results.json tests/copy/test_gpu.py [more modules]

It supports exactly what those modules use: module-level `test_*` functions without fixtures, `pytestmark`,
`pytest.mark.<name>` (marks are recorded; `gpu` skips without CUDA, as the repository's conftest does),
`pytest.mark.parametrize` (one name, or a comma-separated list with tuples), `pytest.skip` and `pytest.raises`.
When the real pytest is importable it is used for those names (the runner still runs the tests itself); otherwise
a small stand-in module is installed as `pytest` first. Exit status: 0 when no test failed, 1 otherwise (a run
where everything was skipped exits 0: the caller decides whether that is acceptable, gpu_check.sh does not).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
import types
from pathlib import Path


class _Skipped(Exception):
    """Raised by the stand-in `pytest.skip`."""


class _Mark:
    def __init__(self, name: str, args: tuple = (), kwargs: dict | None = None) -> None:
        self.name, self.args, self.kwargs = name, args, kwargs or {}

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:  # applied as a decorator
            fn = args[0]
            fn.__dict__.setdefault("pytestmark", []).append(self)
            return fn
        return _Mark(self.name, args, kwargs)


class _MarkFactory:
    def __getattr__(self, name: str) -> _Mark:
        return _Mark(name)


class _Raises:
    def __init__(self, expected, match: str | None = None) -> None:
        self.expected, self.match, self.value = expected, match, None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.expected}")
        if not issubclass(kind, self.expected):
            return False
        if self.match is not None:
            import re

            if not re.search(self.match, str(value)):
                raise AssertionError(f"{value!r} does not match {self.match!r}")
        self.value = value
        return True


def _skip(reason: str = "") -> None:
    raise _Skipped(reason)


_skip.Exception = _Skipped


def stand_in_pytest() -> types.ModuleType:
    module = types.ModuleType("pytest")
    module.mark = _MarkFactory()
    module.skip = _skip
    module.raises = _Raises
    module.__kvtk_stand_in__ = True
    return module


def _install_pytest() -> tuple[type, str]:
    """The exception a skip raises, and which pytest is in use ("pytest X.Y" or "stand-in")."""
    try:
        import pytest
    except ModuleNotFoundError:
        sys.modules["pytest"] = stand_in_pytest()
        return _Skipped, "stand-in"
    return pytest.skip.Exception, f"pytest {pytest.__version__}"


def _marks(obj) -> list:
    marks = getattr(obj, "pytestmark", [])
    return list(marks) if isinstance(marks, (list, tuple)) else [marks]


def _cases(name: str, fn, module_marks: list) -> list[tuple[str, dict, set[str]]]:
    """(test id, keyword arguments, mark names) for every parametrization of `fn`."""
    marks = module_marks + _marks(fn)
    names = {m.name for m in marks}
    cases = [(name, {})]
    for mark in [m for m in marks if m.name == "parametrize"]:  # closest decorator first, as pytest ids
        argnames, values = mark.args[0], mark.args[1]
        keys = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        expanded = []
        for test_id, kwargs in cases:
            for value in values:
                row = value if len(keys) > 1 else (value,)
                label = "-".join(str(v) for v in row)
                expanded.append(
                    (
                        f"{test_id}[{label}]" if "[" not in test_id else f"{test_id[:-1]}-{label}]",
                        {**kwargs, **dict(zip(keys, row))},
                    )
                )
        cases = expanded
    return [(test_id, kwargs, names) for test_id, kwargs in cases]


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def run_module(path: Path, skip_exc: type, results: list[dict]) -> None:
    spec = importlib.util.spec_from_file_location(f"kvtk_gpu_runner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        results.append(
            {"test": f"{path}::<import>", "outcome": "failed", "seconds": 0.0, "detail": traceback.format_exc(limit=8)}
        )
        return
    module_marks = _marks(module)
    cuda = None
    for name, fn in vars(module).items():
        if not (name.startswith("test_") and callable(fn)):
            continue
        for test_id, kwargs, mark_names in _cases(name, fn, module_marks):
            record = {"test": f"{path}::{test_id}", "outcome": "passed", "detail": ""}
            start = time.perf_counter()
            if "gpu" in mark_names:
                cuda = _has_cuda() if cuda is None else cuda
            if "gpu" in mark_names and not cuda:
                record.update(outcome="skipped", detail="needs a CUDA device")
            else:
                try:
                    fn(**kwargs)
                except skip_exc as exc:
                    record.update(outcome="skipped", detail=str(exc))
                except Exception:
                    record.update(outcome="failed", detail=traceback.format_exc(limit=12))
            record["seconds"] = round(time.perf_counter() - start, 3)
            results.append(record)
            print(
                f"{record['outcome'].upper():8} {record['test']} ({record['seconds']} s) {record['detail'][:200]}",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_runner")
    parser.add_argument("modules", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="write the per-test results here")
    args = parser.parse_args(argv)
    skip_exc, which = _install_pytest()
    results: list[dict] = []
    for path in args.modules:
        run_module(path, skip_exc, results)
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("passed", "failed", "skipped")}
    summary = {"runner": f"kernels/gpu_runner.py ({which})", **counts, "tests": results}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1))
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped ({which})")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
