"""A `kvtk serve` server as a child process: started in its own process group, ready when /health answers, stopped
with SIGTERM (vLLM's graceful shutdown) and then SIGKILL for whatever is left of the group (engine core, workers)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from toolkit.serve import client
from toolkit.serve.command import ServeCommand


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def terminate(proc: subprocess.Popen, *, timeout_s: float) -> float | None:
    """SIGTERM and wait up to `timeout_s`: the seconds it took to exit, None if it still runs (or had exited)."""
    if proc.poll() is not None:
        return None
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - start


def stop_group(proc: subprocess.Popen, *, timeout_s: float) -> float | None:
    """`terminate`, then SIGKILL whatever is left of the process group (engine core, workers)."""
    took = terminate(proc, timeout_s=timeout_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.wait(timeout=10)
    return took


@contextmanager
def serving(
    command: ServeCommand, *, port: int, log_path: Path, ready_timeout_s: float = 300.0, stop_timeout_s: float = 30.0
) -> Iterator[str]:
    """Run `command` (built with --host 127.0.0.1 --port `port`) until healthy; yields its base URL."""
    env = {**os.environ, **command.env, "VLLM_SERVER_DEV_MODE": "1"}  # /reset_prefix_cache
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the engine core in its own process, as vllm serve runs it
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(command.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            client.wait_healthy(url, timeout_s=ready_timeout_s, alive=lambda: proc.poll() is None)
            yield url
        finally:
            stop_group(proc, timeout_s=stop_timeout_s)
