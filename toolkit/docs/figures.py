"""The README's figures, taken from the reports of the runs that make them (`kvtk docs figures`).

Each README figure is one figure of a `report.html`: a run's (`kvtk replay`) or a grid's (`kvtk replay --cpu-gib
a,b,c`). The reports give every figure a fixed div id (`fig-<name>`, `report_html.figure_html`); this module reads
that figure's JSON back out of the page and writes it as a PNG with plotly + kaleido, which drives a Chromium
(`$BROWSER_PATH`, else Debian's `chromium`). So the PNG is the report's figure: same code, same data.

    spec = README_FIGURES[0]                         # capacity.png <- the grid report's fig-capacity
    figure = report_figure(grid / "report.html", spec.figure)
    write_pngs([(figure, out / spec.png)])
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput, RunFailed
from toolkit.experiments.report_html import FIGURE_ID_PREFIX

PNG_WIDTH = 1100
MAX_REPORT_BYTES = 64 << 20  # a report inlines plotly.js (about 5 MB) once; its figures are small


@dataclass(frozen=True, slots=True)
class FigureSpec:
    png: str  # the file in docs/figures
    report: str  # "run" (a single kvtk replay run) or "grid" (kvtk replay --cpu-gib a,b,c)
    figure: str  # the figure's name in that report (div id fig-<name>)
    what: str  # what it shows, for docs/figures/README.md and the command's output


README_FIGURES = (
    FigureSpec("capacity.png", "grid", "capacity", "CPU-tier hit tokens of the hot phase against the tier's size"),
    FigureSpec("ttft-cdf.png", "run", "ttft-cdf", "TTFT CDF per variant, one panel per phase"),
    FigureSpec("cpu-tier.png", "run", "cpu-tier", "CPU-tier hit tokens per variant and phase"),
)


def report_figure(report: Path, name: str) -> dict[str, Any]:
    """The figure `fig-<name>` of a report page as plotly JSON ({"data": [...], "layout": {...}})."""
    report = Path(report)
    if report.stat().st_size > MAX_REPORT_BYTES:
        raise BadInput(f"{report}: {report.stat().st_size:,} bytes, more than a report's {MAX_REPORT_BYTES:,}")
    text = report.read_text(encoding="utf-8")
    div = FIGURE_ID_PREFIX + name
    call = re.search(r"Plotly\.newPlot\(\s*" + re.escape(json.dumps(div)) + r"\s*,\s*", text)
    if call is None:
        raise RunFailed(f"{report}: no figure {div!r} (the report has {', '.join(figure_names(text)) or 'none'})")
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(text, call.end())
    comma = re.compile(r"\s*,\s*").match(text, end)
    if comma is None:
        raise RunFailed(f"{report}: figure {div!r}: no layout after its data")
    layout, _ = decoder.raw_decode(text, comma.end())
    return {"data": data, "layout": layout}


def figure_names(text: str) -> list[str]:
    """The names of a report page's figures, in page order."""
    prefix = re.escape(json.dumps(FIGURE_ID_PREFIX)[:-1])
    return [m.group(1) for m in re.finditer(r"Plotly\.newPlot\(\s*" + prefix + r'([^"]+)"', text)]


def write_pngs(figures: list[tuple[dict[str, Any], Path]], *, width: int = PNG_WIDTH) -> list[Path]:
    """Each figure as a PNG at its path (one browser for all); missing kaleido or browser raises `RunFailed`
    naming the fix."""
    from toolkit.private_fs import make_private_dir
    from toolkit.viz.export import write_figure_pngs

    for _, path in figures:
        make_private_dir(Path(path).parent)
    try:
        return write_figure_pngs(figures, width=width, what="figures")
    except RuntimeError as exc:
        raise RunFailed(str(exc)) from exc
