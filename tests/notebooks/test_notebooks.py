"""Every notebook executes under papermill at smoke size through `kvtk notebooks --smoke`; a failing cell fails.

One session-wide run (the CLI, all notebooks, HTML export; `smoke_run` in conftest.py) feeds the per-notebook tests.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from toolkit.cli.notebooks import parse_value
from toolkit.notebooks_runner import execute_notebook, list_notebooks, select_notebooks

pytestmark = pytest.mark.notebook

NOTEBOOKS = [p.stem for p in list_notebooks()]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_at_smoke_size(smoke_run, name):
    run_dir, _, summary = smoke_run
    assert summary[name]["error"] == "", f"{name} failed: {summary[name]['error']} (see {run_dir / (name + '.ipynb')})"
    results = json.loads((run_dir / f"{name}.json").read_text())
    assert results, f"{name} wrote no results"
    html = (run_dir / f"{name}.html").read_text()
    # Offline: plotly.js is inlined in the report, never fetched from a CDN.
    assert not re.search(r"<script[^>]+src=[\"']https?://", html), "a script is loaded from the network"
    assert "Plotly.newPlot" in html and len(html) > 3_000_000  # the figures and plotly.js itself


@pytest.mark.parametrize("name", ["03_cold_hot_replay", "06_sweep"])
def test_experiment_notebook_output_carries_no_vllm_lines(smoke_run, name):
    """vLLM's INFO lines go to the experiment's run folder (`toolkit.engines.vllm_log`), not into the
    notebook's output or its HTML report, and its warnings neither: one summary line says how many and where the
    log is."""
    run_dir, _, _ = smoke_run
    notebook = json.loads((run_dir / f"{name}.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in notebook["cells"] for o in c.get("outputs", []))
    assert "Resolved architecture" not in text and " INFO " not in text and "WARNING" not in text
    assert "Resolved architecture" not in (run_dir / f"{name}.html").read_text()
    match = re.search(
        r"console: \d+ warning lines \(\d+ distinct\), \d+ other lines kept out of this notebook; "
        r"vLLM's own log: (\S+)",
        text,
    )
    assert match, text[-2000:]
    log = Path(match.group(1))
    log = next(log.parent.parent.glob(f"*/{log.name}")) if log.parent.name == "<cell>" else log
    assert "Resolved architecture" in log.read_text()


def test_cli_exit_code_and_private_run_folder(smoke_run):
    run_dir, code, summary = smoke_run
    assert code == 0 and set(summary) == set(NOTEBOOKS)
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(run_dir.parent.stat().st_mode) == 0o700  # every folder the run created


def test_failing_cell_fails_the_run(tmp_path):
    import papermill

    nb = tmp_path / "99_broken.py"
    nb.write_text('# %% tags=["parameters"]\nx: int = 1  # a value\nout_dir: str = ""\n\n# %%\nassert x == 2, x\n')
    with pytest.raises(papermill.PapermillExecutionError, match="AssertionError"):
        execute_notebook(nb, tmp_path / "out", {"x": 3})


def test_parameters_and_selection():
    assert parse_value("3") == 3 and parse_value("[1, 2]") == [1, 2] and parse_value("cuda") == "cuda"
    assert [p.stem for p in select_notebooks(["04"])] == ["04_cache_state"]
    with pytest.raises(ValueError, match="no notebook matches 'zz'"):
        select_notebooks(["zz"])


def test_every_notebook_has_one_typed_parameters_cell():
    import jupytext

    for path in list_notebooks():
        nb = jupytext.read(path)
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(cells) == 1, path.name
        # one typed assignment a line (comments apart: `# fmt: off` keeps a long default on its line)
        lines = [ln for ln in cells[0].source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        assert all(": " in ln.split("=")[0] and "=" in ln for ln in lines), (path.name, lines)
        assert any(ln.startswith("out_dir: str") for ln in lines), path.name
        assert nb.metadata["kernelspec"]["name"] == "python3", path.name


def test_replay_notebook_takes_the_server_engine_and_its_url():
    """03 declares `engine` and `url` (papermill sees them, so `kvtk notebooks -p url ...` is accepted) and passes
    `url` into the experiment's config (`ExperimentConfig.from_params`)."""
    from toolkit.notebooks_runner import declared_parameters

    path = next(p for p in list_notebooks() if p.stem == "03_cold_hot_replay")
    declared = declared_parameters(path)
    assert declared["url"]["default"] == "None" and "server" in declared["engine"]["help"]
    assert '"url": url' in path.read_text()


def test_replay_notebook_refuses_a_preset_on_the_live_engine(tmp_path):
    """The default model is a preset (dry engine); asking the live engine for it says what to pass instead, before
    any engine starts."""
    import papermill

    path = next(p for p in list_notebooks() if p.stem == "03_cold_hot_replay")
    with pytest.raises(papermill.PapermillExecutionError, match="tiny-qwen3-next"):
        execute_notebook(path, tmp_path / "out", {"engine": "live"})
    assert not list((tmp_path / "out").glob("03_live_*"))  # no run folder was started
