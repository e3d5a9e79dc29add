"""Connecting the shared tier to its store, and reconnecting while it is down, never on the caller's thread.

The native `setup` against a master that is down retries for over a minute, and against a stopped one never
returns, so every attempt runs on a daemon thread: `connect` waits for the first one up to `connect_timeout_s`,
and while the tier is down the caller's next submit starts another at most every `pause_s`. At most one attempt
runs at a time, so a store that hangs every `setup` costs one stuck thread, not one per retry.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from toolkit.tiers.shared import backend
from toolkit.tiers.shared.backend import MooncakeClient, StoreClient
from toolkit.tiers.shared.config import SharedTierConfig, parse_master
from toolkit.tiers.shared.frame import FRAME_HEADER_BYTES
from toolkit.tiers.shared.workers import StoreThreads

log = logging.getLogger(__name__)

# Mooncake's native client logs through glog at INFO on stderr (a dozen lines per client, in the engine's log).
# `MC_LOG_LEVEL` (TRACE/INFO/WARNING/ERROR, Mooncake's transfer-engine docs) sets its level; the library reads it
# once per process, at the first client's setup. Set around `setup` only, and only when the user has not set it.
NATIVE_LOG_LEVEL_VAR = "MC_LOG_LEVEL"
NATIVE_LOG_LEVEL = "WARNING"


@dataclass(slots=True)
class Connection:
    client: StoreClient
    threads: StoreThreads  # not started: the tier starts them when it takes the connection


def open_connection(config: SharedTierConfig) -> Connection | str:
    """A connected client with its staging buffers registered, or why not (one line). May block: see above."""
    host, port = parse_master(config.master, "master")
    try:
        socket.create_connection((host, port), timeout=config.connect_timeout_s).close()
    except OSError as exc:
        return f"master {config.master} unreachable ({exc.__class__.__name__}: {exc})"
    if backend.installed_binaries() is None:
        return "the shared-store extra (mooncake-transfer-engine-non-cuda) is not installed"
    with _native_log_level():
        client, rc = MooncakeClient.setup(config.master, config.host, config.local_buffer_bytes)
    if rc != 0:
        return f"client setup against {config.master} returned {rc}"
    threads = StoreThreads(config.queue_depth, FRAME_HEADER_BYTES + max(p.payload_bytes for p in config.pools),
                           "kvtk-shared")  # fmt: skip
    for staging in threads.staging:
        if client.register(staging.address, staging.size_bytes) != 0:
            client.close()
            return "registering the staging buffers with the store client failed"
    return Connection(client, threads)


@contextmanager
def _native_log_level() -> Iterator[None]:
    """`MC_LOG_LEVEL=WARNING` while the native client starts, unless the environment gives a level already."""
    if NATIVE_LOG_LEVEL_VAR in os.environ:
        yield
        return
    os.environ[NATIVE_LOG_LEVEL_VAR] = NATIVE_LOG_LEVEL
    try:
        yield
    finally:
        os.environ.pop(NATIVE_LOG_LEVEL_VAR, None)


class Reconnector:
    def __init__(self, config: SharedTierConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._result: Connection | str | None = None
        self._thread: threading.Thread | None = None
        self._next_at = 0.0
        self._closed = False
        self.reason = "not connected yet"

    def start(self) -> None:
        """Start an attempt unless one is running or the last ended less than `pause_s` ago."""
        if self._closed or self._thread is not None or time.monotonic() < self._next_at:
            return
        self._thread = threading.Thread(target=self._attempt, name="kvtk-shared-connect", daemon=True)
        self._thread.start()

    def wait(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def take(self) -> Connection | None:
        """The connection once an attempt made one (handed over once); None while none is ready."""
        with self._lock:
            result, self._result = self._result, None
        if result is None:
            return None
        self._thread = None
        self._next_at = time.monotonic() + self._config.pause_s
        if isinstance(result, str):
            self.reason = result
            return None
        return result

    def close(self) -> None:
        """No more attempts; one still running closes its client itself if it connects after this."""
        with self._lock:
            self._closed = True
            result, self._result = self._result, None
        if isinstance(result, Connection):
            result.client.close()

    def _attempt(self) -> None:
        try:
            result = open_connection(self._config)
        except Exception as exc:  # noqa: BLE001 - a failed attempt is a reason, never a dead caller
            result = f"{exc.__class__.__name__}: {exc}"
        with self._lock:
            if self._closed and isinstance(result, Connection):
                result.client.close()
                return
            self._result = result


def call_with_deadline(fn: Any, timeout_s: float) -> Any:
    """`fn()`'s result, or a one-line reason when it raised or did not return within `timeout_s` (its thread is a
    daemon and is left behind: a native call cannot be interrupted)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except Exception as exc:  # noqa: BLE001 - reported as the reason
            box.append(f"{exc.__class__.__name__}: {exc}")

    thread = threading.Thread(target=run, name="kvtk-shared-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return box[0] if box else f"no answer within {timeout_s} s"
