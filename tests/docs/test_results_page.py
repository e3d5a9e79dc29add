"""`kvtk docs results` renders a dated results page from run folders: the phase table, the host and the commit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.docs import results_page

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> Path:
    """A small real run folder: the dry engine (vLLM's scheduler, no model), fewshot-small, cold and hot (~30 s)."""
    out = tmp_path_factory.mktemp("docs") / "run"
    cmd = [sys.executable, "-m", "toolkit.cli.main", "replay", "--engine", "dry", "--trace", "fewshot-small"]
    done = subprocess.run([*cmd, "--phases", "cold,hot", "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.engine  # the dry engine runs vLLM's scheduler
def test_a_page_from_a_dry_run_names_host_commit_and_every_phase(dry_run, tmp_path, capsys):
    page = tmp_path / "2026-12-01-dry-fewshot.md"
    assert main(["docs", "results", str(dry_run), "--out", str(page), "--title", "Dry few-shot"]) == 0
    capsys.readouterr()
    text = page.read_text()
    params = json.loads((dry_run / "params.json").read_text())
    summary = json.loads((dry_run / "summary.json").read_text())
    lines = text.splitlines()
    assert lines[0].startswith("# Dry few-shot (")
    host = [line for line in lines if line.startswith("- host: ")]
    assert len(host) == 1 and params["host"]["cpu_model"] in host[0]
    assert f"{params['host']['logical_cpus']} logical CPUs" in host[0]
    commit = [line for line in lines if line.startswith("- commit: ")]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    assert len(commit) == 1
    if head.returncode == 0:
        assert f"`{head.stdout.strip()}`" in commit[0]
    phase_lines = text.split("Serving metrics")[0].splitlines()  # the phase table; the metrics table follows
    rows = [line for line in phase_lines if line.startswith("| toolkit |")]
    assert [row.split(" | ")[1] for row in rows] == ["cold", "hot"]
    for row, phase in zip(rows, summary["phases"]):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[2] == str(phase["requests"])
        assert cells[3] == f"{phase['prompt_tokens']:,}"
        assert cells[4] == f"{phase['local_hit_tokens']:,}"
        assert cells[5] == f"{phase['external_hit_tokens']:,}"
        assert cells[6] == f"{phase['recomputed_tokens']:,}"
    assert summary["phases"][1]["external_hit_tokens"] > 0  # the hot phase is served from the CPU tier
    # An existing page is never overwritten without --force (the hand-written pages stay).
    assert main(["docs", "results", str(dry_run), "--out", str(page)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["docs", "results", str(dry_run), "--out", str(page), "--force"]) == 0


def test_a_folder_without_results_is_bad_input(tmp_path, capsys):
    assert main(["docs", "results", str(tmp_path), "--out", str(tmp_path / "page.md")]) == 2
    assert "params.json" in capsys.readouterr().err
    assert not (tmp_path / "page.md").exists()


def test_without_git_the_commit_comes_from_params():
    assert "`abc1234`" in results_page.commit_line({"versions": {"commit": "abc1234"}}, None)
    line = results_page.commit_line({"versions": {"hybrid-kv-toolkit": "0.1.0"}}, None)
    assert line.startswith("- commit: unknown") and "0.1.0" in line
    assert "uncommitted" in results_page.commit_line({}, ("abc1234", True))


def test_the_phase_table_from_a_summary():
    summary = {
        "phases": [
            {
                "variant": "toolkit",
                "phase": "hot",
                "requests": 2,
                "prompt_tokens": 4096,
                "local_hit_tokens": 0,
                "external_hit_tokens": 3840,
                "recomputed_tokens": 256,
                "oracle_reusable_tokens": 3840,
                "hit_fraction_of_oracle": 1.0,
                "belady_hit_tokens": None,
                "ttft_p50_s": 0.0125,
                "ttft_p99_s": 0.02,
            }
        ]
    }
    table = results_page.phase_table(summary)
    # The run report's columns (none that no row fills: Belady here) and its number format.
    assert table[0] == (
        "| variant | phase | requests | prompt tokens | device-hit tokens | CPU-tier tokens | recomputed tokens | "
        "oracle tokens | hits / oracle | TTFT p50 ms | TTFT p99 ms |"
    )
    assert table[2] == "| toolkit | hot | 2 | 4,096 | 0 | 3,840 | 256 | 3,840 | 1 | 12.5 | 20 |"
