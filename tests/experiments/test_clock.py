"""The dry engine's virtual clock: arrivals, stalls on unfinished loads, per-request queue / TTFT / end-to-end."""

from __future__ import annotations

import json

import pytest

from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.experiments.results import RequestRecord, percentiles, summarize_phase
from toolkit.perfmodel.clock import VirtualClock
from toolkit.perfmodel.step_time import ScheduledWork, build_step_model


def _clock(copy_bytes_per_s: float = 1e9) -> VirtualClock:
    return VirtualClock(build_step_model("qwen3-next-80b-a3b", gpu="h200", tp=4, copy_bytes_per_s=copy_bytes_per_s))


def test_times_follow_the_steps_and_the_link():
    clock = _clock()
    model = clock.model
    clock.arrive("a", 0.0)
    clock.arrive("b", 0.0)
    prefill = [("a", ScheduledWork(4000, 0, True))]
    end1 = clock.end_step((prefill, {"b": 500_000_000}))  # b's 0.5 s load goes out with step 1
    assert end1 == pytest.approx(model.step_seconds([w for _, w in prefill]))
    # Step 2 computes b: it cannot start before b's load finished at 0.5 s (the step ends long before).
    step2 = [("a", ScheduledWork(1, 4000, True)), ("b", ScheduledWork(100, 4000, True))]
    end2 = clock.end_step((step2, {}))
    assert end2 == pytest.approx(0.5 + model.step_seconds([w for _, w in step2]))
    clock.finish("a")
    clock.finish("b")
    a, b = clock.take("a"), clock.take("b")
    assert a.queue_s == 0.0 and a.ttft_s == pytest.approx(end1) and a.e2e_s == pytest.approx(end2)
    assert b.queue_s == 0.0 and b.ttft_s == pytest.approx(end2) and b.e2e_s == pytest.approx(end2)


def test_loads_queue_on_the_link_and_idle_time_jumps_to_arrivals():
    clock = _clock()
    clock.end_step(([], {"x": 1_000_000_000, "y": 1_000_000_000}))  # two 1 s loads back to back
    clock.arrive("late", 10.0)
    clock.wait_until(10.0)
    assert clock.now_s == 10.0
    clock.wait_until(3.0)  # the clock never goes back
    assert clock.now_s == 10.0
    end = clock.end_step(([("y", ScheduledWork(10, 0, True))], {}))
    assert end == pytest.approx(10.0 + clock.model.step_seconds([ScheduledWork(10, 0, True)]))
    clock2 = _clock()
    clock2.end_step(([], {"x": 1_000_000_000, "y": 1_000_000_000}))
    end = clock2.end_step(([("y", ScheduledWork(10, 0, True))], {}))
    assert end == pytest.approx(2.0 + clock2.model.step_seconds([ScheduledWork(10, 0, True)]))  # y waited for x


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentiles("ttft_s", values) == {"ttft_p50_s": 50.0, "ttft_p90_s": 90.0, "ttft_p99_s": 99.0}
    assert percentiles("queue_s", []) == {"queue_p50_s": None, "queue_p90_s": None, "queue_p99_s": None}
    records = [
        RequestRecord("v", "cold", str(i), 10, 0, 0, 10, queue_s=0.0, ttft_s=float(i), e2e_s=2.0 * i)
        for i in range(1, 11)
    ]
    row = summarize_phase(records)
    assert row["ttft_p50_s"] == 5.0 and row["ttft_p99_s"] == 10.0 and row["e2e_p90_s"] == 18.0
    assert row["queue_p99_s"] == 0.0


@pytest.mark.engine
def test_dry_engine_times_requests_on_the_clock_without_changing_hits(tmp_path):
    # Arrivals spaced far apart leave the engine idle between requests: no queueing, and a cold request's TTFT is
    # its prefill alone. The hits are the same as with every request arriving at t=0 (the clock only times).
    spaced = run_experiment(
        ExperimentConfig(
            engine="dry",
            trace="fewshot:num_requests=4,interarrival_s=100",
            phases=("cold", "hot"),
            out=str(tmp_path / "spaced"),
        )
    )
    packed = run_experiment(
        ExperimentConfig(
            engine="dry", trace="fewshot:num_requests=4", phases=("cold", "hot"), out=str(tmp_path / "packed")
        )
    )
    cols = ["variant", "phase", "request_id", "local_hit_tokens", "external_hit_tokens", "recomputed_tokens"]
    assert spaced.requests.select(cols).rows() == packed.requests.select(cols).rows()
    model = build_step_model("tiny-qwen3-next")
    cold = spaced.requests.filter(spaced.requests["phase"] == "cold")
    assert cold["queue_s"].to_list() == [0.0] * 4
    # The first request recomputes its whole prompt: its prefill alone, in the chunks vLLM's Mamba "align" mode
    # cuts at block boundaries (each chunk reads the weights again, so a little more than one 2100-token step).
    first = model.prefill_seconds(cold["prompt_tokens"][0])
    assert first <= cold["ttft_s"][0] < 2 * first
    assert max(cold["ttft_s"].to_list()[1:]) < cold["ttft_s"][0]  # the others hit on the shared prefix
    for frame in (spaced.requests, packed.requests):
        assert (frame["e2e_s"] >= frame["ttft_s"]).all() and (frame["ttft_s"] >= frame["queue_s"]).all()
    # Without arrival times (window 1, closed loop) a request arrives when it is sent, after the one before it
    # finished, as the live engine sends it: no request's latency counts the wait for the others.
    packed_cold = packed.requests.filter(packed.requests["phase"] == "cold")
    assert packed_cold["queue_s"].to_list() == [0.0] * 4
    assert packed_cold["ttft_s"].to_list() == pytest.approx(cold["ttft_s"].to_list(), rel=1e-6)  # float clocks
    row = next(p for p in spaced.summary["phases"] if p["phase"] == "cold")
    assert row["ttft_p99_s"] >= row["ttft_p50_s"] > 0 and row["modelled_s"] > 300  # 4 arrivals 100 s apart
    json.dumps(spaced.summary)


def test_a_steps_loads_are_one_transfer_paying_the_fixed_cost_once():
    from toolkit.perfmodel.clock import VirtualClock
    from toolkit.perfmodel.step_time import GpuProfile, ScheduledWork, StepTimeModel, shape_for_model

    gpu = GpuProfile(
        name="x",
        peak_bf16_flops=1e12,
        peak_fp8_flops=None,
        hbm_bytes_per_s=1e11,
        pcie_bytes_per_s=1e9 / 0.8,  # 1 GB/s at the default copy efficiency
        memory_bytes=1,
        copy_latency_s=0.02,
    )
    clock = VirtualClock(StepTimeModel(shape=shape_for_model("tiny-qwen3-next"), gpu=gpu))
    for r in ("a", "b", "c"):
        clock.arrive(r, 0.0)
    # One step submits three loads of 1 MB: 20 ms once, then 1 ms per request's bytes, in order.
    clock.end_step(([], {"a": 10**6, "b": 10**6, "c": 10**6}))
    end = clock.end_step(([(r, ScheduledWork(4, 100, True)) for r in ("a", "b", "c")], {}))
    assert end == pytest.approx(0.023 + clock.model.step_seconds([ScheduledWork(4, 100, True)] * 3))
    assert clock.take("a").ttft_s == pytest.approx(end)  # computed in the step that waited for c's bytes
