"""A run folder's status.json: what state the run is in, who runs it and a heartbeat, so that a reader can tell a
run that is still going from one whose process was killed (SIGKILL, OOM killer, a lost host) and left "running".

The writer (`StatusFile`) records the pid, the host name and the process's start time (Linux: /proc/<pid>/stat, so
a recycled pid is not mistaken for the run) with the status, and a daemon thread rewrites the file every
`HEARTBEAT_S` seconds while the status is "running". Each write is atomic and owner-only (`private_fs`).

The reader (`read_status`) keeps "complete", "failed" and "interrupted" as written; a "running" file becomes
"dead" when it names this host and its process is gone, "stale" when its heartbeat is older than `STALE_AFTER_S`
(a process on another host, or one that stopped running Python: a stopped or wedged process).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

HEARTBEAT_S = 10.0
# A heartbeat this old means the writer stopped: several missed beats, far above a loaded host's scheduling delays.
STALE_AFTER_S = 120.0
MAX_STATUS_BYTES = 1 << 20  # status.json is read from folders anyone could have written: bounded


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None off Linux or when
    the process is gone. With the pid it names one process: a later process that gets the same pid differs."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None


def owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "pid_start": process_start(pid)}


def _utc(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


class StatusFile:
    """status.json of one run: `mark` writes a status, `start_heartbeat` keeps a "running" one fresh."""

    def __init__(self, write: Callable[[str], Any], *, heartbeat_s: float = HEARTBEAT_S) -> None:
        self._write = write
        self._heartbeat_s = heartbeat_s
        self._lock = threading.Lock()  # a beat never overwrites a later "failed" or "complete"
        self._doc: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark(self, status: str, **extra: Any) -> None:
        with self._lock:
            now = time.time()
            self._doc = {"status": status, **extra, **owner(), "heartbeat_s": now, "heartbeat_utc": _utc(now)}
            self._flush()

    def _flush(self) -> None:
        self._write(json.dumps(self._doc, indent=2, default=str))

    def beat(self) -> None:
        with self._lock:
            if self._doc.get("status") != "running":
                return
            now = time.time()
            self._doc.update(heartbeat_s=now, heartbeat_utc=_utc(now))
            self._flush()

    def start_heartbeat(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="kvtk-heartbeat", daemon=True)
        self._thread.start()

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            try:
                self.beat()
            except OSError:
                return  # the folder went away (removed by its owner): nothing left to keep fresh

    def stop_heartbeat(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=5.0)


def _alive(pid: int, pid_start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process of that pid: alive, and not ours (the start time below tells)
    if pid_start is not None:
        now = process_start(pid)
        return now is None or now == pid_start  # None: no /proc to ask, trust the signal
    return True


def read_status(folder: str | Path, *, now_s: float | None = None) -> dict[str, Any]:
    """status.json as written plus `state` ("complete", "failed", "interrupted", "running", "dead", "stale" or
    "unknown") and `line`, one line for people: "dead (pid 123 gone, last heartbeat 2026-... UTC, 40 s ago)"."""
    path = Path(folder) / "status.json"
    try:
        with open(path, "rb") as handle:
            doc = json.loads(handle.read(MAX_STATUS_BYTES + 1)[:MAX_STATUS_BYTES])
    except FileNotFoundError:
        return {"state": "unknown", "line": "unknown (no status.json)"}
    except (OSError, ValueError) as exc:
        return {"state": "unknown", "line": f"unknown (status.json unreadable: {type(exc).__name__})"}
    if not isinstance(doc, dict):
        return {"state": "unknown", "line": "unknown (status.json is not an object)"}
    status = str(doc.get("status", "unknown"))
    out = {**doc, "state": status, "line": status + (f" ({doc['error']})" if doc.get("error") else "")}
    if status != "running":
        return out
    now_s = time.time() if now_s is None else now_s
    beat = doc.get("heartbeat_s")
    age = now_s - beat if isinstance(beat, (int, float)) else None
    last = f"last heartbeat {doc.get('heartbeat_utc')}, {age:.0f} s ago" if age is not None else "no heartbeat"
    pid = doc.get("pid")
    if isinstance(pid, int) and doc.get("host") == socket.gethostname() and not _alive(pid, doc.get("pid_start")):
        return {**out, "state": "dead", "line": f"dead (pid {pid} gone, {last})"}
    if age is None or age > STALE_AFTER_S:
        where = f"pid {pid} on {doc.get('host')}" if pid is not None else "an unknown process"
        return {**out, "state": "stale", "line": f"stale ({last}; {where})"}
    return {**out, "line": f"running (pid {pid} on {doc.get('host')}, {last})"}
