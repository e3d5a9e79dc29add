"""`kvtk doctor` and the line the connector logs at start: the facts of this install and the matrix's verdict."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toolkit.vllm import doctor
from toolkit.vllm.version import installed_distribution


def test_the_installed_build_is_in_the_tested_matrix():
    found = doctor.diagnose()
    dist, version = installed_distribution()
    assert found.vllm == f"{dist} {version}"
    assert found.tested and not found.advice
    assert found.model_runner in ("v1", "v2")
    assert version in found.line() and "NOT TESTED" not in found.line()


def test_a_build_outside_the_matrix_says_what_to_install(monkeypatch):
    monkeypatch.setattr(doctor, "installed_distribution", lambda: ("vllm", "0.35.1"))
    found = doctor.diagnose()
    assert not found.tested
    assert "vllm>=0.33,<0.35" in found.advice and "NOT TESTED" in found.line()


@pytest.mark.parametrize(
    "release, env, expected", [((0, 34, 0), "0", "v2"), ((0, 33, 0), "0", "v1"), ((0, 33, 0), "1", "v2")]
)
def test_model_runner_follows_the_release_and_the_environment(monkeypatch, release, env, expected):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
    assert doctor.model_runner(release) == expected


def test_the_model_runner_the_doctor_names_is_the_one_the_scheduler_follows(monkeypatch, base_configs):
    """Checked against vLLM itself: the harness's scheduler on this install (no GPU platform on official wheels)."""
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    from toolkit.engines.harness import Harness

    harness = Harness("tiny-qwen2", connector="toolkit", base_config=base_configs("tiny-qwen2"))
    uses_v2 = getattr(harness.vllm_config, "use_v2_model_runner", True)  # 0.34: no V1 to choose
    assert doctor.diagnose().model_runner == ("v2" if uses_v2 else "v1")


def test_cli_prints_json_and_exits_zero_on_a_tested_build():
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "doctor", "--json"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["vllm"] == " ".join(installed_distribution()) and facts["tested"]
