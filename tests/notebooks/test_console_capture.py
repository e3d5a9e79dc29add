"""`captured_console`: what a block prints, Python's and the C level's, stays out of the output; one line says how
much; a failing block shows its last lines."""

from __future__ import annotations

import os
import sys

import pytest

from toolkit.notebooks_runner import captured_console


def test_python_and_fd_level_lines_are_kept_and_summarised(capfd, tmp_path):
    with captured_console() as console:
        print("engine start")
        os.write(2, b"vLLM WARNING: stale pin\nvLLM WARNING: stale pin\n")
        print("Warning: a python one", file=sys.stderr)
    assert capfd.readouterr() == ("", "")
    assert console.summary("/x/vllm.log") == (
        "console: 3 warning lines (2 distinct), 1 other lines kept out of this notebook; vLLM's own log: /x/vllm.log"
    )
    saved = console.save(tmp_path)
    assert "stale pin" in saved.read_text() and oct(saved.stat().st_mode & 0o777) == "0o600"


def test_a_failing_block_shows_its_last_lines(capfd):
    with pytest.raises(RuntimeError), captured_console():
        os.write(1, b"the reason it failed\n")
        raise RuntimeError("boom")
    assert "the reason it failed" in capfd.readouterr().err
