"""`kvtk replay --engine server` against a server started by `kvtk serve` (engine core and worker in their own
processes) prints the same phase table as `--engine live` (in-process) on the same trace: per request the same
device-local and CPU-tier hit tokens, outputs identical to cold in both. The server is started with the live engine's
settings (64 device blocks, 1 GiB tier, 16 sequences, max_model_len 8192, hash unit 128: kvtk serve's default).
vLLM's SimpleCPU served the same way on the same trace reuses no more prompt tokens than the toolkit on any request
of any phase (device cache and CPU tier together: `usage.prompt_tokens_details.cached_tokens`)."""

from __future__ import annotations

import subprocess

import pytest
from serve_test_utils import background_server, kvtk_command

from conftest import LIVE_SETTINGS_ARGS
from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.experiments.results import load_run

pytestmark = pytest.mark.engine

TRACE = "agentic-small"  # sessions: a turn's prefix is the previous turn's prompt and output
PHASES = ("cold", "hot", "replay")
HIT_COLUMNS = (
    "requests",
    "prompt_tokens",
    "local_hit_tokens",
    "external_hit_tokens",
    "recomputed_tokens",
    "oracle_reusable_tokens",
)


def _table(summary: dict) -> list[tuple]:
    return [(row["phase"], *(row[c] for c in HIT_COLUMNS)) for row in summary["phases"]]


def _phases(requests):
    """The phases' requests, without the warm-up (a run folder's phase files do not hold it)."""
    return requests.filter(requests["phase"] != "warmup")


def _reused(requests) -> dict[tuple[str, str], int]:
    rows = _phases(requests).select(["phase", "request_id", "local_hit_tokens", "external_hit_tokens"]).to_dicts()
    return {(r["phase"], r["request_id"]): r["local_hit_tokens"] + r["external_hit_tokens"] for r in rows}


def test_replay_against_kvtk_serve_equals_live_and_beats_simplecpu(tmp_path, live_settings_server, server_recording):
    # vLLM's SimpleCPU served the same way starts while the toolkit's server is replayed (a server's start is a
    # third of this test); it is stopped before the in-process live run.
    simplecpu_args = [*LIVE_SETTINGS_ARGS, "--connector", "simplecpu"]
    with background_server(simplecpu_args, log_path=tmp_path / "simplecpu.log") as simple_started:
        url = live_settings_server[0]
        # The session's server (conftest.py; test_serve_live.py stops it), replayed by the CLI as a user runs it;
        # its run folder holds the per-request frame (`load_run`: the library's server path runs in
        # test_serve_differential).
        printed = subprocess.run(
            [
                *kvtk_command(),
                "replay",
                "--engine",
                "server",
                "--url",
                url,
                "--trace",
                TRACE,
                "--phases",
                ",".join(PHASES),
                "--out",
                str(tmp_path / "cli"),
                "--record-cache-state",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert printed.returncode == 0, printed.stderr[-3000:]
        assert "engine server" in printed.stdout and "toolkit         hot" in printed.stdout, printed.stdout
        server = load_run(tmp_path / "cli")
        _check_streamed_token_times(server["requests"], tmp_path / "cli", printed.stdout)
        _check_served_recording(server_recording, printed.stderr)
        simple_url, _proc = simple_started()
        simple = run_experiment(
            ExperimentConfig(
                engine="server",
                url=simple_url,
                trace=TRACE,
                phases=PHASES,
                connector="simplecpu",
                out=str(tmp_path / "simplecpu"),
            )
        )
    ours, theirs = _reused(server["requests"]), _reused(simple.requests)
    assert ours.keys() == theirs.keys()
    worse = {key: (ours[key], theirs[key]) for key in ours if ours[key] < theirs[key]}
    assert not worse, worse
    assert all(row["outputs_identical"] for row in simple.summary["phases"]), simple.summary["phases"]
    live = run_experiment(
        ExperimentConfig(engine="live", trace=TRACE, phases=PHASES, negative_control=False, out=str(tmp_path / "live"))
    )
    assert _table(server["summary"]) == _table(live.summary)
    hot = {row["phase"]: row for row in server["summary"]["phases"]}["hot"]
    assert hot["external_hit_tokens"] > 0 and hot["local_hit_tokens"] > 0  # both tiers in play on this trace
    for row in server["summary"]["phases"]:
        assert row["outputs_identical"], row
    columns = ["phase", "request_id", "local_hit_tokens", "external_hit_tokens"]
    assert server["requests"].select(columns).to_dicts() == _phases(live.requests).select(columns).to_dicts()
    # The geometry the server reported over /metrics is the live engine's.
    for key in ("hash_block_tokens", "scheduler_block_tokens", "cpu_blocks", "device_blocks"):
        assert server["summary"][key] == live.summary[key], key
    # The phase table's lines print the same numbers (TTFT columns aside); the serving-metrics table follows it.
    phase_table = printed.stdout.split("\ngoodput:")[0]
    assert phase_table != printed.stdout, printed.stdout
    for line in phase_table.splitlines():
        if line.startswith("toolkit "):
            phase = line.split()[1]
            row = {r["phase"]: r for r in live.summary["phases"]}[phase]
            assert line.split()[3:7] == [
                str(row[c]) for c in ("prompt_tokens", "local_hit_tokens", "external_hit_tokens", "recomputed_tokens")
            ], line


def _check_streamed_token_times(requests, run_dir, stdout: str) -> None:
    """ITL and TPOT from the streamed tokens: positive, and per request TPOT (which also holds the stream's last
    event) within a few ms of the mean gap between tokens; both in metrics.json and the printed table."""
    import json

    streamed = 0
    for row in _phases(requests).iter_rows(named=True):
        tokens, gaps = len(row["output_token_ids"]), row["itl_s"]
        if tokens < 2:
            continue
        streamed += 1
        assert len(gaps) == tokens - 1 and all(g >= 0 for g in gaps), row["request_id"]
        tpot_s = (row["e2e_s"] - row["ttft_s"]) / (tokens - 1)
        assert tpot_s > 0 and sum(gaps) / len(gaps) == pytest.approx(tpot_s, rel=0.5, abs=0.005), row["request_id"]
    assert streamed > 0
    for phase in json.loads((run_dir / "metrics.json").read_text())["phases"]:
        assert phase["itl_p50_ms"] > 0 and phase["tpot_p50_ms"] > 0 and phase["itl_p99_ms"] >= phase["itl_p50_ms"]
    assert "ITL p50 ms" in stdout and "TPOT p50 ms" in stdout and "not measured by this engine" not in stdout


def _check_served_recording(path, stderr: str) -> None:
    """The server's connector (`kvtk serve --record-cache-state`) wrote the widget's recording as it served: owner
    only, steps with stores and lookups of this replay's requests, read by the widget's loader."""
    import stat
    import time

    from toolkit.viz.recording import load_recording

    assert "kvtk serve --record-cache-state PATH" in stderr  # replay's own flag points at the server's
    deadline = time.monotonic() + 10  # rewritten at most every 2 s on a recorded step
    while time.monotonic() < deadline and '"phase":"served"' not in path.read_text():
        time.sleep(0.5)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    recording = load_recording(path)
    kinds = {event["kind"] for step in recording.steps for event in step["events"]}
    assert recording.steps and {"store", "load"} <= kinds, kinds  # the hot phase loads what cold stored
    assert recording.header["requests"] and "kvtk serve" in recording.header["source"]
