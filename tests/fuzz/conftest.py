"""Shared helpers of the bad-input suite: one-line errors, and a working folder that must stay as it was."""

from __future__ import annotations

import pytest


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """cwd = a fresh temp folder; the test's inputs go under `in/`; `runs/` (the default output) must not appear."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    return tmp_path


@pytest.fixture
def cli(capsys):
    """Run `kvtk ARGS` in-process; returns (exit code, stderr)."""
    from toolkit.cli.main import main

    def run(*argv: str) -> tuple[int, str]:
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's own refusal (exit 2, its usage and one error line)
            rc = exc.code
        err = capsys.readouterr().err
        return rc, err

    return run


@pytest.fixture(scope="session")
def warm_imports():
    """Import what the up-front checks import (vLLM, for the dry engine's layout) once, outside any deadline."""
    from toolkit.engines.dry import dry_layout

    dry_layout("tiny-qwen3-next")
