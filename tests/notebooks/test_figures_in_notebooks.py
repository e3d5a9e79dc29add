"""Every figure and table of every notebook, as the smoke run rendered them: phases in run order, no bound below
an achieved value, units in axis titles, one colour per variant and group kind, tables with all their rows.

The checks (`notebook_figure_checks.py`) are tested on figures that break each rule, so a pass means something.
"""

from __future__ import annotations

import json

import notebook_figure_checks as checks
import plotly.graph_objects as go
import pytest

from toolkit.notebooks_runner import list_notebooks
from toolkit.viz.style import show_table

pytestmark = pytest.mark.notebook
PLOTLY = "application/vnd.plotly.v1+json"


def _outputs(run_dir, name):
    notebook = json.loads((run_dir / f"{name}.ipynb").read_text())
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            data = dict(output.get("data", {}))
            if "text" in output:  # a stream (print)
                data.setdefault("text/plain", output["text"])
            yield data


def test_every_notebook_figure_and_table_passes_the_checks(smoke_run):
    run_dir, _, _ = smoke_run
    problems, seen, counts = [], {}, {}
    for path in list_notebooks():
        name = path.stem
        for data in _outputs(run_dir, name):
            if PLOTLY in data:
                fig = data[PLOTLY]
                counts[name] = counts.get(name, 0) + 1
                title = (fig.get("layout", {}).get("title") or {}).get("text", "")
                for problem in (
                    checks.phase_order_problems(fig)
                    + checks.bound_problems(fig)
                    + checks.unit_problems(fig)
                    + checks.colour_problems(fig, seen)
                    + checks.plotly_table_problems(fig)
                ):
                    problems.append(f"{name} / {title[:60]!r}: {problem}")
            if "text/html" in data:
                for problem in checks.table_problems("".join(data["text/html"])):
                    problems.append(f"{name} / table: {problem}")
            elif "text/plain" in data:
                for problem in checks.text_table_problems("".join(data["text/plain"])):
                    problems.append(f"{name} / printed table: {problem}")
    assert not problems, "\n".join(problems)
    assert all(len(colours) == 1 for colours in seen.values()), seen  # across notebooks too
    assert {"toolkit", "no_offload", "simplecpu"} <= set(seen)  # 03 and 06 draw the baselines
    assert counts.get("03_cold_hot_replay", 0) >= 7 and counts.get("01_block_geometry", 0) >= 3, counts


def test_the_checks_catch_what_they_check():
    bad_order = go.Figure(go.Bar(x=[["t", "t", "t"], ["hot", "cold", "replay"]], y=[1, 2, 3], name="x"))
    assert checks.phase_order_problems(bad_order.to_plotly_json())
    bars = go.Bar(x=["hot"], y=[10], name="CPU-tier hit")
    above = go.Figure([bars, go.Scatter(x=["hot"], y=[8], name="Belady", meta={"bounds": ["CPU-tier hit"]})])
    assert checks.bound_problems(above.to_plotly_json())
    unlabelled = go.Figure([bars, go.Scatter(x=["hot"], y=[12], name="Belady (same capacity)")])
    assert checks.bound_problems(unlabelled.to_plotly_json())
    no_unit = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(xaxis_title="TTFT (ms)", yaxis_title="tokens"))
    assert checks.unit_problems(no_unit.to_plotly_json()) == ["yaxis title 'tokens' names no unit"]
    wrong = go.Figure(go.Scatter(x=[1], y=[1], name="toolkit", line=dict(color="#000000")))
    assert checks.colour_problems(wrong.to_plotly_json(), {})
    import polars as pl

    whole = show_table(pl.DataFrame({"a": list(range(30)), "why": ["a long reason " * 20] * 30}))._repr_html_()
    assert checks.table_problems(whole) == [] and whole.count("a long reason " * 20) == 30
    cut = whole.replace("<tr><td", "<td", 3)
    assert checks.table_problems(cut) == ["table shows 27 of 30 rows"]
    with pl.Config(tbl_rows=4):
        assert checks.table_problems(pl.DataFrame({"a": list(range(30))})._repr_html_())  # polars' cut-off frame
        assert checks.text_table_problems(repr(pl.DataFrame({"a": list(range(30))})))
    assert checks.text_table_problems(repr(pl.DataFrame({"why": ["a reason longer than polars shows " * 3]})))
    assert (
        checks.text_table_problems(
            repr(show_table(pl.DataFrame({"a": list(range(30)), "why": ["a long reason " * 9] * 30})))
        )
        == []
    )


def test_experiment_report_of_the_replay_notebook_run(smoke_run):
    """The HTML report of 03's run folder: every phase row, in run order, and Belady at the hash unit."""
    import re

    from toolkit.experiments.report import write_report

    run_dir, _, _ = smoke_run
    folder = next(run_dir.glob("03_dry_*"))
    text = write_report(folder).read_text()
    summary = json.loads((folder / "summary.json").read_text())
    assert checks.table_problems(text) == []
    assert f"data-rows='{len(summary['phases'])}'" in text
    body = text[text.index("<tbody>") : text.index("</tbody>")]
    cells = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td>", body)
    for variant in {v for v, _ in cells}:
        phases = [p for v, p in cells if v == variant]
        assert phases == [p for p in ("cold", "hot", "pressure", "replay") if p in phases], (variant, phases)
    assert "Belady: CPU-tier hits, same tier, optimal eviction (hash-unit keys)" in text
