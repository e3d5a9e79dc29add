"""`kvtk replay --engine server` against a server started by `kvtk serve` (engine core and worker in their own
processes) prints the same phase table as `--engine live` (in-process) on the same trace: per request the same
device-local and CPU-tier hit tokens, outputs identical to cold in both. The server is started with the live engine's
settings (64 device blocks, 1 GiB tier, 16 sequences, max_model_len 8192, hash unit 128: kvtk serve's default)."""

from __future__ import annotations

import subprocess

import pytest

from serve_test_utils import kvtk_command, running_server
from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.experiments.capacity import LIVE_DEFAULT_CPU_BYTES
from toolkit.experiments.live import DEFAULT_LIVE_DEVICE_BLOCKS

pytestmark = pytest.mark.engine

TRACE = "agentic-small"  # sessions: a turn's prefix is the previous turn's prompt and output
PHASES = ("cold", "hot", "replay")
HIT_COLUMNS = ("requests", "prompt_tokens", "local_hit_tokens", "external_hit_tokens", "recomputed_tokens",
               "oracle_reusable_tokens")


def _table(summary: dict) -> list[tuple]:
    return [(row["phase"], *(row[c] for c in HIT_COLUMNS)) for row in summary["phases"]]


def test_replay_against_kvtk_serve_equals_live(tmp_path):
    args = ["--model", "tiny-qwen3-next", "--cpu-bytes", str(LIVE_DEFAULT_CPU_BYTES),
            "--num-gpu-blocks-override", str(DEFAULT_LIVE_DEVICE_BLOCKS), "--max-num-seqs", "16",
            "--max-model-len", "8192"]
    with running_server(args, log_path=tmp_path / "server.log") as (url, _proc):
        # The CLI as a user runs it, then the same through the library for the per-request frame.
        printed = subprocess.run([*kvtk_command(), "replay", "--engine", "server", "--url", url, "--trace", TRACE,
                                  "--phases", ",".join(PHASES), "--out", str(tmp_path / "cli")],
                                 capture_output=True, text=True, timeout=300)
        assert printed.returncode == 0, printed.stderr[-3000:]
        assert "engine server" in printed.stdout and "toolkit         hot" in printed.stdout, printed.stdout
        server = run_experiment(ExperimentConfig(engine="server", url=url, trace=TRACE, phases=PHASES,
                                                 out=str(tmp_path / "server")))
    live = run_experiment(ExperimentConfig(engine="live", trace=TRACE, phases=PHASES, negative_control=False,
                                           out=str(tmp_path / "live")))
    assert _table(server.summary) == _table(live.summary)
    hot = {row["phase"]: row for row in server.summary["phases"]}["hot"]
    assert hot["external_hit_tokens"] > 0 and hot["local_hit_tokens"] > 0  # both tiers in play on this trace
    for row in server.summary["phases"]:
        assert row["outputs_identical"], row
    columns = ["phase", "request_id", "local_hit_tokens", "external_hit_tokens"]
    assert server.requests.select(columns).to_dicts() == live.requests.select(columns).to_dicts()
    # The geometry the server reported over /metrics is the live engine's.
    for key in ("hash_block_tokens", "scheduler_block_tokens", "cpu_blocks", "device_blocks"):
        assert server.summary[key] == live.summary[key], key
    # The phase lines print the same numbers (TTFT columns aside).
    for line in printed.stdout.splitlines():
        if line.startswith("toolkit "):
            phase = line.split()[1]
            row = {r["phase"]: r for r in live.summary["phases"]}[phase]
            assert line.split()[3:7] == [str(row[c]) for c in ("prompt_tokens", "local_hit_tokens",
                                                               "external_hit_tokens", "recomputed_tokens")], line
