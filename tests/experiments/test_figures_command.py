"""`kvtk docs figures`: one command runs a `kvtk replay` run and a tier-size grid and writes the README's figures
as PNGs taken from those runs' report.html (the reports' own figures, with the runs' own numbers); and `kvtk docs
results` on that run shows the report's own tables.

A tiny Mooncake-format slice on the tiny model with a 16-block device cache keeps it to seconds; kaleido drives
Debian's chromium (the PNG tests are skipped where either is missing; the results-page test then runs the same
`kvtk replay` alone)."""

from __future__ import annotations

import html
import importlib.util
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.docs.figures import README_FIGURES, report_figure
from toolkit.viz.export import chromium_path

EXPORTS = importlib.util.find_spec("kaleido") is not None and chromium_path() is not None
needs_export = pytest.mark.skipif(not EXPORTS, reason="kaleido and a chromium export the PNGs")
pytestmark = pytest.mark.engine
TIERS_GIB = (0.01, 0.05)


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def markdown_tables(text: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            cells = [c.strip().replace("\\|", "|") for c in line.strip()[1:-1].replace("\\|", "\0").split("|")]
            cells = [c.replace("\0", "|") for c in cells]
            if not all(set(c) <= set("-:") for c in cells):  # the alignment row
                tables[-1].append(cells)
        previous = line
    return tables


def write_slice(path: Path) -> Path:
    """10 requests in two families of shared 512-token prefix blocks, each with an own block."""
    lines = []
    for i in range(10):
        ids = ([0, 1, 2] if i % 2 else [5, 6]) + [100 + i]
        lines.append({"timestamp": i * 200, "input_length": len(ids) * 512 - 64, "output_length": 4, "hash_ids": ids})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory, request) -> Path:
    """The figures command's run where it can export PNGs; else the same kvtk replay run, alone."""
    if EXPORTS:
        return request.getfixturevalue("made") / "work" / "run"
    root = tmp_path_factory.mktemp("run")
    argv = ["replay", "--model", "tiny-qwen3-next", "--trace", str(write_slice(root / "slice.jsonl"))]
    assert main([*argv, "--device-blocks", "16", "--baseline", "no_offload,simplecpu", "--out", str(root / "run")]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("figures")
    argv = ["docs", "figures", "--out", str(root / "png"), "--work", str(root / "work"), "--model", "tiny-qwen3-next"]
    argv += ["--tp", "1", "--trace", str(write_slice(root / "slice.jsonl")), "--device-blocks", "16"]
    argv += ["--cpu-gib", ",".join(map(str, TIERS_GIB))]
    assert main(argv) == 0
    return root


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@needs_export
def test_every_readme_figure_is_a_png_of_its_reports_figure(made):
    for spec in README_FIGURES:
        png = made / "png" / spec.png
        figure = report_figure(made / "work" / spec.report / "report.html", spec.figure)
        assert png_size(png) == (1100, figure["layout"]["height"])  # rendered from that figure's layout
        assert png.stat().st_size > 10_000  # axes, labels and data, not a blank page
        from PIL import Image

        colours = Image.open(png).convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50


@needs_export
def test_the_figures_carry_the_runs_numbers(made):
    from toolkit.experiments.compare import load_rows

    # The capacity curve: per variant, the grid's hot-phase CPU-tier tokens at each tier size.
    capacity = report_figure(made / "work" / "grid" / "report.html", "capacity")
    rows = [r for r in load_rows([made / "work" / "grid"]) if r.key[1] == "hot"]
    for trace in capacity["data"]:
        if trace["name"].startswith("ceiling"):
            continue
        expected = {
            float(r.config["cpu_gib"]): r.phase["external_hit_tokens"] for r in rows if r.key[0] == trace["name"]
        }
        assert dict(zip(trace["x"], trace["y"])) == expected
    assert sorted(capacity["data"][0]["x"]) == list(TIERS_GIB)
    # The run's CPU-tier bars: its summary's tokens per variant and measured phase.
    summary = json.loads((made / "work" / "run" / "summary.json").read_text())
    bars = report_figure(made / "work" / "run" / "report.html", "cpu-tier")
    for trace in bars["data"]:
        expected = {p["phase"]: p["external_hit_tokens"] for p in summary["phases"] if p["variant"] == trace["name"]}
        assert dict(zip(trace["x"], trace["y"])) == {k: v for k, v in expected.items() if k != "pressure"}
    assert {t["name"] for t in bars["data"]} == {"toolkit", "no_offload", "simplecpu"}


def test_a_single_tier_size_is_refused_before_anything_runs(tmp_path, capsys):
    argv = ["docs", "figures", "--out", str(tmp_path / "png"), "--work", str(tmp_path / "work"), "--cpu-gib", "1"]
    assert main(argv) == 2
    assert "--cpu-gib 1" in capsys.readouterr().err
    assert not (tmp_path / "work").exists() and not (tmp_path / "png").exists()


def test_kvtk_docs_results_shows_the_run_reports_tables_and_headline(run_folder, tmp_path, capsys):
    """`kvtk docs results` and report.html agree: the page's tables (the phase table and the serving metrics) are
    tables of the report, same column names and cells, and the page carries the report's headline sentence."""
    run, page = run_folder, tmp_path / "page.md"
    assert main(["docs", "results", str(run), "--out", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text()
    parser = Tables()
    parser.feed((run / "report.html").read_text())
    in_report = [[[html.unescape(c) for c in row] for row in table] for table in parser.tables]
    in_page = markdown_tables(text)
    assert len(in_page) == 2  # the phase table and the serving metrics
    for table in in_page:
        assert table in in_report, table[0]
    phases, metrics = in_page
    assert phases[0][:6] == ["variant", "phase", "requests", "prompt tokens", "device-hit tokens", "CPU-tier tokens"]
    assert "TTFT p50 ms" in metrics[0] and "CPU-tier vs SimpleCPU tokens" in metrics[0]
    summary = json.loads((run / "summary.json").read_text())
    assert len(phases) == 1 + len(summary["phases"])  # every (variant, phase) row
    hot = next(p for p in summary["phases"] if p["variant"] == "toolkit" and p["phase"] == "hot")
    row = next(r for r in phases[1:] if r[:2] == ["toolkit", "hot"])
    assert row[5] == f"{hot['external_hit_tokens']:,}"  # the numbers are the run's own
    sentence = (run / "report.html").read_text().split("<p class='headline'>")[1].split("</p>")[0]
    assert html.unescape(sentence) in text
