"""Where cells run: in this process (`serial`) or as Ray tasks (a local Ray by default, or an existing cluster).

Both executors have the same two calls, `submit(cell, task)` and `next_done() -> (cell, outcome)`, and both run
`toolkit.sweep.cell.run_cell`, so a cell's numbers do not depend on where it ran. Concurrency is capped by the
driver (`--max-parallel`); each Ray task declares the CPUs and memory it needs, so Ray itself never packs more
cells on a node than it can hold.
"""

from __future__ import annotations

import collections
from typing import Any

from toolkit.errors import BadInput
from toolkit.sweep.cell import run_cell
from toolkit.sweep.spec import Cell

RAY_INSTALL_HINT = (
    "Ray is not installed: install the sweep extra (`pip install .[sweep]` in the repository, "
    "or `pip install 'hybrid-kv-toolkit[sweep]'`), or run the cells in this process with --serial"
)


class RayUnavailable(RuntimeError):
    """`import ray` failed; the message says how to install it."""


class SerialExecutor:
    """Runs each submitted cell in this process, in submission order, when its result is asked for."""

    name = "serial"

    def __init__(self) -> None:
        self._queue: collections.deque[tuple[Cell, dict[str, Any]]] = collections.deque()

    def submit(self, cell: Cell, task: dict[str, Any]) -> None:
        self._queue.append((cell, task))

    def next_done(self) -> tuple[Cell, dict[str, Any]]:
        cell, task = self._queue.popleft()
        return cell, run_cell(task)

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name}

    def close(self) -> None:
        pass


def import_ray():
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(RAY_INSTALL_HINT) from exc
    return ray


def init_ray(ray, *, attempts: int = 4, **kwargs) -> None:
    """`ray.init(**kwargs)`, tried again when a local start times out: Ray waits a fixed 30 s for its raylet,
    which a loaded machine can exceed (seen here with a load average above 10 on 2 cores)."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            ray.shutdown()


class RayExecutor:
    """Cells as Ray tasks. Joins the session already initialised in this process (a notebook, a test) if any;
    otherwise `address=None` starts a private local Ray and `"auto"` / `"ray://host:port"` / `"host:port"` joins
    an existing cluster. A session this executor started is shut down by `close()`."""

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        num_cpus: float = 1.0,
        memory_bytes: int | None = None,
        log_to_driver: bool = False,
    ) -> None:
        ray = import_ray()
        self._ray = ray
        self._owns_session = not ray.is_initialized()
        if self._owns_session:
            # "local": a new Ray for this sweep, never a cluster found on the machine by accident; joining one
            # is what --address is for.
            extra = {} if address else {"include_dashboard": False}
            init_ray(ray, address=address or "local", log_to_driver=log_to_driver, configure_logging=False, **extra)
        options: dict[str, Any] = {"num_cpus": num_cpus, "max_retries": 0}  # the driver retries, once, visibly
        if memory_bytes:
            options["memory"] = int(memory_bytes)
        self._remote = ray.remote(run_cell).options(**options)
        self._pending: dict[Any, Cell] = {}
        self._address = address
        if not address:  # a cluster joined by address may be autoscaling: its nodes are not all there yet
            self._check_fits(num_cpus, memory_bytes)

    def _check_fits(self, num_cpus: float, memory_bytes: int | None) -> None:
        """A task no node can hold would wait forever; say so instead (the largest node's CPUs and memory)."""
        try:
            nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive")]
        except Exception:  # a client that cannot list nodes: Ray reports an unschedulable task itself
            return
        if not nodes:
            return
        most_cpus = max(n.get("CPU", 0.0) for n in nodes)
        most_memory = max(n.get("memory", 0.0) for n in nodes)
        if num_cpus > most_cpus:
            self.close()
            raise BadInput(f"num_cpus: {num_cpus:g} per cell, but the largest Ray node has {most_cpus:g} CPUs")
        if memory_bytes and memory_bytes > most_memory:
            self.close()
            raise BadInput(
                f"memory_gib: {memory_bytes / 2**30:.3g} per cell, but the largest Ray node offers "
                f"{most_memory / 2**30:.3g} GiB to tasks"
            )

    def submit(self, cell: Cell, task: dict[str, Any]) -> None:
        self._pending[self._remote.remote(task)] = cell

    def next_done(self) -> tuple[Cell, dict[str, Any]]:
        ray = self._ray
        ready, _ = ray.wait(list(self._pending), num_returns=1)
        ref = ready[0]
        cell = self._pending.pop(ref)
        try:
            return cell, ray.get(ref)
        except ray.exceptions.RayError as exc:  # the worker died (out of memory, killed node): a failed attempt
            text = str(exc).strip().splitlines()
            return cell, {
                "ok": False,
                "error": f"{type(exc).__name__}: {text[-1] if text else ''}",
                "files": {},
                "elapsed_s": 0.0,
            }

    def describe(self) -> dict[str, Any]:
        ray = self._ray
        out: dict[str, Any] = {
            "executor": self.name,
            "ray_version": ray.__version__,
            "address": self._address,
            "joined_existing_session": not self._owns_session,
        }
        try:
            out["cluster_cpus"] = ray.cluster_resources().get("CPU")
            out["nodes"] = len([n for n in ray.nodes() if n.get("Alive")])
        except Exception:  # client mode may not answer everything; the description is informative only
            pass
        return out

    def close(self) -> None:
        for ref in list(self._pending):
            self._ray.cancel(ref, force=True)
        self._pending.clear()
        if self._owns_session:
            self._ray.shutdown()


class Progress:
    """One status line on stderr: done / running / failed, elapsed, estimated time left."""

    def __init__(self, *, total: int, skipped: int, enabled: bool, stream=None) -> None:
        import sys
        import time

        self._time = time.monotonic
        self.started = self._time()
        self.total = total
        self.skipped = skipped
        self.done = skipped
        self.failed = 0
        self.running = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self) -> str:
        elapsed = self._time() - self.started
        finished = self.done - self.skipped + self.failed
        left = self.total - self.done - self.failed
        eta = "?" if not finished else _clock(elapsed / finished * left)
        return (
            f"sweep: {self.done}/{self.total} done, {self.running} running, {self.failed} failed | "
            f"elapsed {_clock(elapsed)} | left ~{eta}"
        )

    def show(self) -> None:
        if not self.enabled:
            return
        if self._tty:
            self.stream.write("\r" + self.line().ljust(90))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
