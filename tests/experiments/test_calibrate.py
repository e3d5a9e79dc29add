"""`kvtk calibrate`: the fit recovers known constants, a fitted profile loads as `--gpu PROFILE.json` and times the
dry engine by its constants; on a quiet host, the calibrated dry engine predicts the live engine's TTFT and
end-to-end time per request (the issue's targets: MAPE <= 15% TTFT, <= 10% e2e, per phase)."""

from __future__ import annotations

import json
import time

import pytest

from toolkit.experiments.calibrate import Sample, decode_steps, fastest, fit, mape, prefill_steps
from toolkit.experiments.calibrate_fit import median_ape
from toolkit.perfmodel.step_time import GpuProfile, StepTimeModel, build_step_model, load_gpu, shape_for_model

MODEL = "tiny-qwen3-next"


def _model(flops_per_s: float, bytes_per_s: float, overhead_s: float) -> StepTimeModel:
    gpu = GpuProfile(
        name="x",
        peak_bf16_flops=flops_per_s,
        peak_fp8_flops=None,
        hbm_bytes_per_s=bytes_per_s,
        pcie_bytes_per_s=1e9,
        memory_bytes=1,
        roofline="sum",
    )
    return StepTimeModel(
        shape=shape_for_model(MODEL), gpu=gpu, compute_efficiency=1.0, memory_efficiency=1.0, overhead_s=overhead_s
    )


def _samples(truth: StepTimeModel, chunk: int = 2048) -> list[Sample]:
    out = []
    for n in (64, 256, 1024, 4096):
        for kind, steps in (("prefill", prefill_steps(n, chunk)), ("decode", decode_steps(n, 16, 1))):
            out.append(Sample(kind, n, 1, sum(truth.step_seconds(list(s)) for s in steps), steps))
    for batch in (2, 8):
        steps = decode_steps(64, 16, batch)
        out.append(Sample("decode", 64, batch, sum(truth.step_seconds(list(s)) for s in steps), steps))
    return out


def test_fit_recovers_the_constants_that_made_the_samples():
    # Compute-bound prefill and a per-step overhead that dominates decode, as on a CPU with a tiny model.
    truth = _model(flops_per_s=2e11, bytes_per_s=2e10, overhead_s=0.02)
    unit = _model(1.0, 1.0, 0.0)
    result = fit(unit, _samples(truth))
    assert result["fit_mape"] < 1e-6 and result["num_dropped"] == 0
    assert result["overhead_s"] == pytest.approx(0.02, rel=1e-6)
    assert result["flops_per_s"] == pytest.approx(2e11, rel=1e-6)
    assert result["bytes_per_s"] == pytest.approx(2e10, rel=1e-6)


def test_steps_slowed_by_other_tenants_are_dropped_and_the_constants_still_found():
    truth = _model(flops_per_s=2e11, bytes_per_s=2e10, overhead_s=0.02)
    samples = _samples(truth)
    # Every fourth measurement waited 3x as long for the cores: a shared host's noise, one-sided.
    noisy = [
        Sample(s.kind, s.prompt_tokens, s.batch, s.seconds * (3 if i % 4 == 0 else 1), s.steps)
        for i, s in enumerate(samples)
    ]
    result = fit(_model(1.0, 1.0, 0.0), noisy)
    assert result["num_dropped"] == len(samples[::4])
    assert result["overhead_s"] == pytest.approx(0.02, rel=1e-6)
    assert result["flops_per_s"] == pytest.approx(2e11, rel=1e-6)


def test_fastest_keeps_one_sample_per_shape():
    a = Sample("prefill", 64, 1, 0.3, ())
    b = Sample("prefill", 64, 1, 0.2, ())
    c = Sample("decode", 64, 1, 0.5, ())
    assert sorted(s.seconds for s in fastest([a, b, c])) == [0.2, 0.5]
    assert mape([1.1, 0.9, None], [1.0, 1.0, 2.0]) == pytest.approx(0.1)


def test_the_median_error_ignores_one_outlier_the_mean_does_not():
    predicted, measured = [1.1, 0.95, 1.0, 10.0, None], [1.0, 1.0, 1.0, 1.0, 2.0]
    assert mape(predicted, measured) == pytest.approx((0.1 + 0.05 + 0.0 + 9.0) / 4)
    assert median_ape(predicted, measured) == pytest.approx(0.1)  # errors 0, 0.05, 0.1, 9: the upper median
    with pytest.raises(ValueError):
        median_ape([None], [1.0])


def test_a_profile_file_is_a_gpu_profile_with_its_step_overhead(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(
        json.dumps(
            {
                "name": "cpu-test",
                "peak_bf16_dense_flops": 4e11,
                "peak_fp8_dense_flops": None,
                "hbm_bytes_per_s": 5e10,
                "pcie_bytes_per_s": 1e10,
                "memory_bytes": 1 << 34,
                "step_overhead_s": 0.015,
            }
        )
    )
    profile = load_gpu(str(path))
    assert profile.name == "cpu-test" and profile.step_overhead_s == 0.015 and profile.peak_fp8_flops is None
    model = build_step_model(MODEL, gpu=str(path))
    assert model.overhead_s == 0.015
    from toolkit.perfmodel.step_time import ScheduledWork

    decode = model.step_seconds([ScheduledWork(1, 100, True)])
    assert 0.015 < decode < 0.016  # a tiny model's decode step is its overhead on this profile
    assert build_step_model(MODEL, gpu=str(path), overhead_s=0.0).overhead_s == 0.0
    with pytest.raises(ValueError, match="no profile file"):
        load_gpu(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a GPU profile"):
        load_gpu(str(tmp_path / "bad.json"))
    assert load_gpu("h200").step_overhead_s == 0.0


def test_fit_separates_a_load_latency_from_its_copy_rate():
    truth = _model(flops_per_s=2e11, bytes_per_s=2e10, overhead_s=0.02)
    samples = _samples(truth)
    for n, num_bytes in ((512, 4 << 20), (1536, 12 << 20), (3072, 24 << 20)):
        tail = prefill_steps(64, 2048)
        seconds = sum(truth.step_seconds(list(s)) for s in tail) + 0.010 + num_bytes / 2e9
        samples.append(Sample("load", n, 1, seconds, tail, load_bytes=num_bytes))
    result = fit(_model(1.0, 1.0, 0.0), samples)
    assert abs(result["copy_latency_s"] / 0.010 - 1) < 0.1
    assert abs(result["copy_bytes_per_s"] / 2e9 - 1) < 0.1
    assert [s.kind for s in result["samples"]].count("load") == 3


def test_loads_the_bytes_do_not_explain_cost_a_fixed_latency_per_step_at_the_memcpy_rate():
    # Residuals growing faster than the bytes (a line through them would start at -10 ms), as the live engine's loads
    # measured: their cost is the steps that start and wait for the copies, paid once per step, not per byte.
    truth = _model(flops_per_s=2e11, bytes_per_s=2e10, overhead_s=0.02)
    samples = _samples(truth)
    tail = prefill_steps(64, 2048)
    for n, num_bytes, left in ((512, 1_000_000, 0.005), (1536, 2_000_000, 0.010), (3072, 3_000_000, 0.030)):
        seconds = sum(truth.step_seconds(list(s)) for s in tail) + left
        samples.append(Sample("load", n, 1, seconds, tail, load_bytes=num_bytes))
    result = fit(_model(1.0, 1.0, 0.0), samples)
    assert result["copy_bytes_per_s"] > 5e8  # the host's memcpy, not the 80 MB/s of the line's slope
    assert result["copy_latency_s"] == pytest.approx(0.015, rel=0.1)  # the residuals' mean


def test_the_dry_vs_live_benchmark_reads_its_modes_and_refuses_bad_input_before_any_engine(capsys, tmp_path):
    from toolkit.bench.dry_vs_live import Mode, parse_modes
    from toolkit.cli.main import main

    assert parse_modes("sequential, concurrency:3,open:0.25") == [
        Mode("sequential"),
        Mode("concurrency:3", concurrency=3),
        Mode("open:0.25", interarrival_s=0.25),
    ]
    for bad in ("sequential:2", "concurrency:0", "open:-1", "burst", ""):
        with pytest.raises(ValueError, match="modes"):
            parse_modes(bad)
    started = time.monotonic()
    assert main(["bench", "dry-vs-live", "--modes", "concurrency:x"]) == 2
    assert main(["bench", "dry-vs-live", "--profile", str(tmp_path / "none.json")]) == 2
    assert time.monotonic() - started < 5  # refused before vLLM or a live engine starts
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "modes: 'concurrency:x'" in err[0] and "none.json" in err[1]
