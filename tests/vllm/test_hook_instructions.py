"""`kvtk bench scheduler --instructions`: the hooks framed by `operator.call`, counted by valgrind's callgrind.

The whole bench (minutes under valgrind) is run by hand; here, what it rests on: the marker symbol collects
exactly the framed work on this Python build, the totals parse, and marked hooks answer as unmarked ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit.bench import hook_instructions
from toolkit.core.observer import CallTimer
from toolkit.engines.harness import timed


def _collected(tmp_path, program: str) -> dict[str, int]:
    out_file = tmp_path / "callgrind.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out_file}",
            "--collect-atstart=no",
            f"--toggle-collect={timed.CALL_MARKER_SYMBOL}",
            sys.executable,
            "-S",
            "-c",
            program,
        ],
        capture_output=True,
        timeout=300,
        check=True,
    )
    return hook_instructions.read_totals(out_file.read_text())


@pytest.mark.skipif(hook_instructions.missing_tools() is not None, reason="valgrind is not installed")
def test_the_marker_collects_only_the_work_it_frames(tmp_path):
    small = _collected(tmp_path, "import operator; operator.call(sum, range(1_000))")
    large = _collected(tmp_path, "import operator; operator.call(sum, range(100_000))")
    outside = _collected(tmp_path, "import operator; sum(range(100_000)); operator.call(int)")
    assert 0 < small["Ir"] < large["Ir"]
    assert large["Ir"] > 25 * small["Ir"]  # a hundred times the work, give or take the call
    assert outside["Ir"] < small["Ir"]  # the unframed sum is not counted


def test_totals_are_read_by_event_name():
    text = "version: 1\nevents: Ir Dr DLmr\nfn=x\n0 5 1 0\nsummary: 1200 300 7\ntotals: 1200 300 7\n"
    assert hook_instructions.read_totals(text) == {"Ir": 1200, "Dr": 300, "DLmr": 7}
    with pytest.raises(RuntimeError, match="no events"):
        hook_instructions.read_totals("version: 1\n")


def test_marked_hooks_answer_as_unmarked_ones(monkeypatch):
    class Connector:
        def get_num_new_matched_tokens(self, request, num_computed_tokens):
            """The lookup."""
            return num_computed_tokens + 1, False

    plain = timed.timed_subclass(Connector)
    monkeypatch.setattr(timed, "_CALL_MARKER", None)
    timed.mark_hook_calls()
    marked = timed.timed_subclass(Connector)
    calls = CallTimer()
    for cls in (plain, marked):
        connector = cls()
        timed.watch_connector(connector, timer=calls)
        assert connector.get_num_new_matched_tokens(type("R", (), {"request_id": "r"})(), 7) == (8, False)
    assert marked.get_num_new_matched_tokens.__doc__ == "The lookup."
    assert calls.calls == 2
