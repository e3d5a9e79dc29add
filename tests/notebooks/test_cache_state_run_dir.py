"""Notebook 04 opens a run folder of your own (`run_dir`) under papermill: a dry run recorded with
`--record-cache-state`, its widget's static snapshot at the run's busiest step."""

from __future__ import annotations

import json

import pytest

from toolkit.notebooks_runner import execute_notebook, notebooks_dir
from toolkit.viz.state_model import CacheStateModel

pytestmark = [pytest.mark.notebook, pytest.mark.engine]


def test_notebook_04_opens_a_recorded_dry_run(tmp_path):
    from toolkit.experiments import ExperimentConfig, run_experiment

    config = ExperimentConfig(engine="dry", trace="agentic-small", phases=("cold", "hot"), record_cache_state=True)
    run = run_experiment(config.replace(out=str(tmp_path / "run"))).run_dir
    model = CacheStateModel.from_run_dir(run)

    ipynb = execute_notebook(notebooks_dir() / "04_cache_state.py", tmp_path / "out", {"run_dir": str(run)})
    results = json.loads((tmp_path / "out" / "04_cache_state.json").read_text())
    assert results["recording"].endswith(f"(run folder {run})") and "--engine dry" in results["recording"]
    assert results["num_steps"] == model.num_steps
    assert results["shown_step"] == results["busiest_step"] == model.busiest_step() > 0
    snapshot = next(
        "".join(o["data"]["text/html"])
        for cell in json.loads(ipynb.read_text())["cells"]
        for o in cell.get("outputs", [])
        if "kvtk-snapshot" in "".join(o.get("data", {}).get("text/html", ""))
    )
    assert f"at step {model.busiest_step()} (the busiest step" in snapshot
    assert " ".join(model.status_lines(model.busiest_step())[0].split()) in snapshot
