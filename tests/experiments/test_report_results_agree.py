"""`kvtk docs results` and the run's report.html agree: the page's tables (the phase table and the serving metrics)
are tables of the report, with the same column names and the same cells, and the page carries the report's
headline sentence. A small dry run on a Mooncake-format slice (the tiny model, a 16-block device cache)."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from toolkit.cli.main import main


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
    lines = []
    for i in range(8):
        ids = ([0, 1, 2] if i % 2 else [5, 6]) + [100 + i]
        lines.append({"timestamp": i * 200, "input_length": len(ids) * 512 - 64, "output_length": 4, "hash_ids": ids})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.engine
def test_the_results_page_shows_the_reports_tables_and_headline(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["replay", "--trace", str(write_slice(tmp_path / "slice.jsonl")), "--device-blocks", "16"]
    assert main([*argv, "--phases", "cold,hot", "--baseline", "simplecpu", "--out", str(run)]) == 0
    page = tmp_path / "page.md"
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
    assert len(phases) == 1 + 4  # two variants x two phases, every row
    summary = json.loads((run / "summary.json").read_text())
    hot = next(p for p in summary["phases"] if p["variant"] == "toolkit" and p["phase"] == "hot")
    assert f"{hot['external_hit_tokens']:,}" in phases[2]  # the numbers are the run's own
    headline = [line for line in (run / "report.html").read_text().split("<p class='headline'>")[1:]]
    sentence = html.unescape(headline[0].split("</p>")[0])
    assert sentence in text
