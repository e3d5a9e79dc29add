"""Start and stop a shared store on loopback: `mooncake_master` plus one store process that owns the memory.

    with StoreServer(capacity_bytes=256 << 20) as server:   # free ports, waits until the memory is mounted
        config = SharedTierConfig(master=server.master, ...)

Why a separate store process: in Mooncake the memory belongs to the clients that mount it, and an engine that
mounted it would take every block with it when it exits. The store process (the wheel's `mooncake_client`, a
"standalone store") mounts `capacity_bytes` and serves it; engines connect with none of their own, so two engines
share one pool that outlives either. Logs go to an owner-only run folder, removed at stop unless `keep_dir`.
For the tests, `kill()` (SIGKILL, a crash) and `pause()` / `resume()` (SIGSTOP / SIGCONT, a store that stops
answering) are there too.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from toolkit.errors import BadInput, RunFailed
from toolkit.private_fs import PRIVATE_FILE_MODE, make_private_dir
from toolkit.tiers.shared.backend import Binaries, installed_binaries

MIN_CAPACITY_BYTES = 16 << 20
MAX_CAPACITY_BYTES = 1 << 40


class StoreServer:
    def __init__(self, capacity_bytes: int, *, run_dir: Path | None = None, host: str = "127.0.0.1",
                 ready_timeout_s: float = 30.0, keep_dir: bool = False, rpc_port: int = 0) -> None:  # fmt: skip
        if not MIN_CAPACITY_BYTES <= capacity_bytes <= MAX_CAPACITY_BYTES:
            raise BadInput(f"store capacity: {capacity_bytes} B; give {MIN_CAPACITY_BYTES}-{MAX_CAPACITY_BYTES} B")
        self.capacity_bytes = capacity_bytes
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self._run_dir = run_dir
        self._rpc_port = rpc_port  # 0: a free one
        self._keep_dir = keep_dir
        self.folder: Path | None = None
        self.master = ""  # host:port, once started
        self._metrics_port = 0
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> StoreServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        binaries = installed_binaries()
        if binaries is None:
            raise RunFailed("shared store: mooncake_master is not installed (the shared-store extra; `make setup`)")
        parent = make_private_dir(self._run_dir) if self._run_dir else Path(tempfile.gettempdir())
        self.folder = Path(tempfile.mkdtemp(prefix="kvtk-store-", dir=parent))  # 0700
        try:
            self._start(binaries)
        except BaseException:
            self.stop()
            raise

    def _start(self, binaries: Binaries) -> None:
        rpc, self._metrics_port, store_port = _free_ports(self.host, 3)
        rpc = self._rpc_port or rpc
        self.master = f"{self.host}:{rpc}"
        self._spawn("master", [str(binaries.master), f"--rpc_address={self.host}", f"--rpc_port={rpc}",
                               f"--metrics_host={self.host}", f"--metrics_port={self._metrics_port}",
                               "--enable_http_metadata_server=false", "--logtostderr"])  # fmt: skip
        self._spawn("store", [str(binaries.store), f"--host={self.host}", f"--port={store_port}",
                              f"--master_server_address={self.master}", "--metadata_server=P2PHANDSHAKE",
                              "--protocol=tcp", f"--global_segment_size={self.capacity_bytes}",
                              "--logtostderr"])  # fmt: skip
        deadline = time.monotonic() + self.ready_timeout_s
        while self.mounted_bytes() < self.capacity_bytes:
            for proc, name in zip(self._procs, ("master", "store")):
                if proc.poll() is not None:
                    raise RunFailed(f"shared store: {name} exited with {proc.returncode}; see {self._log(name)}")
            if time.monotonic() > deadline:
                raise RunFailed(f"shared store: not ready after {self.ready_timeout_s} s; see {self.folder}")
            time.sleep(0.05)

    def _spawn(self, name: str, argv: list[str]) -> None:
        fd = os.open(self._log(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "wb") as out:
            # a session of its own: a signal to the test's process group does not reach it, stop() does
            self._procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True))  # fmt: skip

    def _log(self, name: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{name}.log"

    def mounted_bytes(self) -> int:
        """The memory the master sees mounted (0 while it does not answer)."""
        return int(self.master_metrics().get("master_total_capacity_bytes", 0.0))

    def master_metrics(self) -> dict[str, float]:
        """The master's unlabelled Prometheus samples (`master_key_count`, `master_put_end_requests_total`, ...);
        empty while it does not answer."""
        try:
            url = f"http://{self.host}:{self._metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=1.0) as reply:  # noqa: S310 - our own loopback server
                text = reply.read(1 << 20).decode(errors="replace")
        except OSError:
            return {}
        samples: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("master_") and "{" not in name:
                try:
                    samples[name] = float(value)
                except ValueError:
                    continue
        return samples

    def pause(self) -> None:
        """The master stops answering (SIGSTOP): calls against it wait for their own timeouts."""
        self._signal(0, signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(0, signal.SIGCONT)

    def kill(self) -> None:
        """A crash: SIGKILL to the store process and the master."""
        for n in (1, 0):
            self._signal(n, signal.SIGKILL)
        for proc in self._procs:
            proc.wait(5)

    def _signal(self, n: int, sig: signal.Signals) -> None:
        if n < len(self._procs) and self._procs[n].poll() is None:
            self._procs[n].send_signal(sig)

    def stop(self) -> None:
        """Stop both processes (SIGTERM, then SIGKILL after 5 s) and remove the run folder unless kept."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a paused master cannot act on SIGTERM
                proc.terminate()
        for proc in reversed(self._procs):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._procs = []
        if self.folder is not None and not self._keep_dir:
            shutil.rmtree(self.folder, ignore_errors=True)


def _free_ports(host: str, count: int) -> list[int]:
    """Ports free now (bound together, so they differ); a race with another process is possible and shows as a
    start that fails with a clear log."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
