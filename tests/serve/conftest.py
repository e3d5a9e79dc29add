"""One `kvtk serve` server for the tests that need the live engine's settings (started once: ~30-60 s here).
test_serve_live.py stops it with SIGTERM as its last check, so it runs after test_replay_server.py (file order)."""

from __future__ import annotations

import time

import pytest
from serve_test_utils import running_server

from toolkit.engines.live import DEFAULT_LIVE_DEVICE_BLOCKS
from toolkit.experiments.capacity import LIVE_DEFAULT_CPU_BYTES

SHUTDOWN_TIMEOUT_S = 15
# The live engine's settings (LiveEngine defaults, and what run_experiment gives it for traces under 8k tokens).
LIVE_SETTINGS_ARGS = [
    "--model",
    "tiny-qwen3-next",
    "--cpu-bytes",
    str(LIVE_DEFAULT_CPU_BYTES),
    "--num-gpu-blocks-override",
    str(DEFAULT_LIVE_DEVICE_BLOCKS),
    "--max-num-seqs",
    "16",
    "--max-model-len",
    "8192",
    "--shutdown-timeout",
    str(SHUTDOWN_TIMEOUT_S),
]


@pytest.fixture(scope="session")
def server_recording(tmp_path_factory):
    """Where the session server's connector writes its cache-state recording (`kvtk serve --record-cache-state`)."""
    return tmp_path_factory.mktemp("server") / "cache_state.jsonl"


@pytest.fixture(scope="session")
def live_settings_server(server_recording):
    """(base_url, process, seconds to ready) of a server started the README's way with the live engine's settings,
    recording its CPU tier's states to `server_recording`."""
    started = time.monotonic()
    log = server_recording.parent / "server.log"
    args = [*LIVE_SETTINGS_ARGS, "--record-cache-state", str(server_recording)]
    with running_server(args, log_path=log, shutdown_timeout_s=SHUTDOWN_TIMEOUT_S) as (url, proc):
        yield url, proc, time.monotonic() - started
