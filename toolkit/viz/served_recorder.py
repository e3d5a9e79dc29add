"""The cache-state recording of a server's CPU tier, written by the connector itself (`record_cache_state_path`).

A client cannot observe a server's connector: it runs in vLLM's engine-core process. With the connector key
`record_cache_state_path` (`kvtk serve --record-cache-state PATH`), the scheduler-role connector subscribes a
`RunRecorder` to its own manager when vLLM binds the device block pool (a worker has no manager and records
nothing). The same caps bound it (`RecordingCaps`: 1,000 steps, 8 MiB, ...). A server has no end of run, so the
file is rewritten as it grows, at most every `WRITE_INTERVAL_S` on a recorded step (atomically: a reader sees a
whole file), and a last time when the connector shuts down; it covers the server's life from its start, resets
included.

A path that cannot be written is one line at start (`check_recording_path`: `kvtk serve` refuses it before vLLM
starts; the connector logs it and serves without recording).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from toolkit.core.metadata import StepMetadata
from toolkit.core.observer import unsubscribe
from toolkit.core.requests import StepInput
from toolkit.errors import BadInput
from toolkit.viz.run_recorder import RecordingCaps, RunRecorder

WRITE_INTERVAL_S = 2.0  # a rewrite costs at most the 8 MiB cap; every 2 s keeps that off most scheduler steps


def check_recording_path(path: str | Path, field: str = "record_cache_state_path") -> Path:
    """The recording's path made absolute, or BadInput in one line: its folder must exist and be writable, and the
    path must not be a folder or a symlink (the file is replaced atomically, never followed)."""
    target = Path(path).expanduser().absolute()
    if target.is_dir():
        raise BadInput(f"{field}: {path} is a folder; give a file path such as {target / 'cache_state.jsonl'}")
    if target.is_symlink():
        raise BadInput(f"{field}: {path} is a symlink; give a plain file path")
    if not target.parent.is_dir():
        raise BadInput(f"{field}: {path}: the folder {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise BadInput(f"{field}: {path}: the folder {target.parent} is not writable")
    return target


class ServedRecorder(RunRecorder):
    """A `RunRecorder` that writes its file while it records (see the module docstring)."""

    def __init__(self, manager: Any, path: str | Path, *, source: str, caps: RecordingCaps | None = None) -> None:
        super().__init__(manager, path, source=source, caps=caps)
        self.phase = "served"
        self._written_steps = -1
        self._written_at = 0.0
        try:
            self.write()  # the file exists from the start (a header, no steps): a reader knows recording is on
        except OSError:
            unsubscribe(manager, self)
            raise

    def on_step(self, step: StepInput, meta: StepMetadata) -> None:
        super().on_step(step, meta)
        now = time.monotonic()
        if self.num_steps != self._written_steps and now - self._written_at >= WRITE_INTERVAL_S:
            self.write()

    def write(self) -> int:
        self._written_steps, self._written_at = self.num_steps, time.monotonic()
        return super().write()


def start_served_recording(manager: Any, path: str, *, describe: str) -> ServedRecorder | None:
    """The connector's recorder on `manager`, or None with one log line when `path` cannot be written."""
    import logging

    log = logging.getLogger("toolkit.vllm")
    try:
        target = check_recording_path(path)
        recorder = ServedRecorder(manager, target, source=f"kvtk serve: {describe} (process {os.getpid()})")
    except (BadInput, OSError) as exc:
        log.error("HybridOffloadConnector: no cache-state recording: %s", exc)
        return None
    log.info("HybridOffloadConnector: recording the CPU tier's states to %s", target)
    return recorder
