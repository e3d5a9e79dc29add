"""Start and stop `kvtk serve` in tests: a free 127.0.0.1 port, its own process group, SIGTERM then SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from toolkit.serve import client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kvtk_command() -> list[str]:
    """The venv's `kvtk` console script (what a user runs), else `python -m toolkit`."""
    script = Path(sys.executable).with_name("kvtk")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "toolkit"]


def terminate(proc: subprocess.Popen, *, timeout_s: float) -> float | None:
    """SIGTERM the server and wait up to `timeout_s`: the seconds it took to exit, None if it still runs."""
    if proc.poll() is not None:
        return None
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - start


def stop(proc: subprocess.Popen, *, timeout_s: float) -> float | None:
    """`terminate`, then SIGKILL whatever is left of its process group (engine core, workers)."""
    took = terminate(proc, timeout_s=timeout_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait(timeout=10)
    return took


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@contextmanager
def running_server(args: list[str], *, log_path: Path, ready_timeout_s: float = 240.0,
                   shutdown_timeout_s: float = 15.0, env: dict | None = None):
    """`kvtk serve --host 127.0.0.1 --port P ARGS` until healthy; yields (base_url, proc); stopped (SIGTERM, then SIGKILL) on exit."""
    port = free_port()
    command = [*kvtk_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    full_env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", **(env or {})}
    full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's engine core runs in its own process
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
        base_url = f"http://127.0.0.1:{port}"
        try:
            client.wait_healthy(base_url, timeout_s=ready_timeout_s, alive=lambda: proc.poll() is None)
            yield base_url, proc
        finally:
            stop(proc, timeout_s=shutdown_timeout_s + 10)
