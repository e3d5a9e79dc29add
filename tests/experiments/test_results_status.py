"""A dead run reads as dead: status.json carries the pid, the host and a heartbeat, and the readers (`read_status`,
`load_run`, the HTML report) tell a killed run from a running one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.experiments.report import write_report
from toolkit.experiments.results import RunFolder, load_run
from toolkit.experiments.run_status import STALE_AFTER_S, StatusFile, read_status


def _doc(folder: Path) -> dict:
    return json.loads((folder / "status.json").read_text())


def test_running_status_names_its_process_and_beats(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.status = StatusFile(folder.status._write, heartbeat_s=0.05)
    folder.mark("running")
    first = _doc(folder.path)
    assert first["pid"] == os.getpid() and first["host"] == socket.gethostname()
    deadline = time.time() + 10
    while _doc(folder.path)["heartbeat_s"] == first["heartbeat_s"] and time.time() < deadline:
        time.sleep(0.05)
    assert _doc(folder.path)["heartbeat_s"] > first["heartbeat_s"]
    assert read_status(folder.path)["state"] == "running"
    assert (folder.path / "status.json").stat().st_mode & 0o777 == 0o600
    folder.mark("failed", error="boom")
    time.sleep(0.2)  # a late beat must not turn "failed" back into "running"
    assert _doc(folder.path)["status"] == "failed"
    status = read_status(folder.path)
    assert status["state"] == "failed" and "boom" in status["line"]


def test_old_heartbeat_on_another_host_is_stale(tmp_path):
    now = time.time()
    doc = {"status": "running", "pid": 1, "host": "elsewhere.invalid", "heartbeat_s": now - STALE_AFTER_S - 5}
    (tmp_path / "status.json").write_text(json.dumps(doc))
    status = read_status(tmp_path, now_s=now)
    assert status["state"] == "stale" and "elsewhere.invalid" in status["line"]
    assert read_status(tmp_path, now_s=now - 10)["state"] == "running"  # a fresh beat from another host


def test_a_recycled_pid_is_not_the_run(tmp_path):
    doc = {"status": "running", "pid": os.getpid(), "host": socket.gethostname(), "pid_start": "1"}
    doc["heartbeat_s"] = time.time()
    (tmp_path / "status.json").write_text(json.dumps(doc))
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc: the process start time cannot be read")
    assert read_status(tmp_path)["state"] == "dead"


def _wait_for_running(folder: Path, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"kvtk replay exited ({proc.returncode}) before its run folder said running")
        try:
            if _doc(folder)["status"] == "running" and (folder / "params.json").exists():  # the engine started
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.05)
    pytest.fail("no running status.json within the time limit")


@pytest.mark.engine
def test_a_killed_replay_reads_as_dead(tmp_path):
    """A real `kvtk replay --engine dry` killed with SIGKILL once its engine started (params.json written)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "replay", "--engine", "dry", "--trace", "agentic:num_sessions=40,num_turns=6"]
        + ["--model", "tiny-qwen3-next", "--phases", "cold,hot,replay", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_running(out, proc, timeout_s=240)
        assert read_status(out)["state"] == "running"  # alive: the reader must not call it dead
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _doc(out)["status"] == "running"  # what the killed process left
    status = read_status(out)
    assert status["state"] == "dead", status
    assert status["line"].startswith(f"dead (pid {proc.pid} gone, last heartbeat ")
    assert load_run(out)["status"]["state"] == "dead"
    assert "run status: dead (pid" in write_report(out).read_text()
