"""Start and stop `kvtk serve` in tests: a free 127.0.0.1 port, its own process group, SIGTERM then SIGKILL
(`toolkit.serve.process`, which `kvtk bench serve` uses too)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from toolkit.serve import client
from toolkit.serve.process import free_port, stop_group, terminate  # noqa: F401  (terminate: for the tests)


def kvtk_command() -> list[str]:
    """The venv's `kvtk` console script (what a user runs), else `python -m toolkit`."""
    script = Path(sys.executable).with_name("kvtk")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "toolkit"]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@contextmanager
def running_server(
    args: list[str],
    *,
    log_path: Path,
    ready_timeout_s: float = 240.0,
    shutdown_timeout_s: float = 15.0,
    env: dict | None = None,
):
    """`kvtk serve --host 127.0.0.1 --port P ARGS` until healthy; yields (base_url, proc); stopped (SIGTERM, then SIGKILL) on exit."""
    port = free_port()
    command = [*kvtk_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    full_env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", **(env or {})}
    full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's engine core runs in its own process
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
        base_url = f"http://127.0.0.1:{port}"
        try:
            client.wait_healthy(base_url, timeout_s=ready_timeout_s, alive=lambda: proc.poll() is None)
            yield base_url, proc
        finally:
            stop_group(proc, timeout_s=shutdown_timeout_s + 10)


@contextmanager
def background_server(args: list[str], *, log_path: Path, **options):
    """`running_server` started on a thread, so its start (most of a server test's time) overlaps other work: yields
    a function that waits until the server is up and returns (base_url, proc). Stopped on exit (after its start
    ended, whatever the test did meanwhile)."""
    server = running_server(args, log_path=log_path, **options)
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(server.__enter__)
        try:
            yield starting.result
        finally:
            if starting.exception() is None:  # a start that failed has stopped its process already
                server.__exit__(None, None, None)
