"""Figures of an executed notebook as PNG files: plotly + kaleido driving a Chromium (`kvtk notebooks --png`).

kaleido (the `export` extra) renders through a Chromium-based browser: `$BROWSER_PATH`, else Debian's `chromium`
on the PATH. One browser serves all of a notebook's figures (`plotly.io.write_images`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from toolkit.private_fs import make_private_dir
from toolkit.scoped_env import scoped_env

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PNG_WIDTH = 1100


def notebook_figures(ipynb: Path) -> list[dict]:
    """The plotly figures an executed notebook displayed, in order (the widget's static snapshot not included)."""
    nb = json.loads(Path(ipynb).read_text())
    return [
        output["data"][PLOTLY_MIME]
        for cell in nb.get("cells", [])
        for output in cell.get("outputs", [])
        if PLOTLY_MIME in output.get("data", {})
    ]


def chromium_path() -> str | None:
    """The browser kaleido drives: `$BROWSER_PATH`, else Debian's chromium on the PATH."""
    import shutil

    return os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")


def export_pngs(ipynb: Path, out_dir: Path, *, width: int = PNG_WIDTH, only: set[str] | None = None) -> list[Path]:
    """Every figure of an executed notebook as `<out_dir>/<stem>-NN.png` (plotly + kaleido, one browser for all);
    with `only`, just the figures named there (`03_cold_hot_replay-01`). Missing kaleido or browser raises
    `RuntimeError` naming the fix (`write_figure_pngs`).
    """
    named = [(f"{Path(ipynb).stem}-{i:02d}", f) for i, f in enumerate(notebook_figures(ipynb))]
    named = [(n, f) for n, f in named if only is None or n in only]
    out_dir = make_private_dir(Path(out_dir))
    return write_figure_pngs([(f, out_dir / f"{n}.png") for n, f in named], width=width, what="--png")


def write_figure_pngs(figures: list[tuple[dict, Path]], *, width: int = PNG_WIDTH, what: str) -> list[Path]:
    """Each plotly figure (its JSON) as a PNG at its path, one browser for all. kaleido drives a Chromium-based
    browser: `$BROWSER_PATH`, else `chromium` on the PATH (Debian's package). Missing kaleido or browser, or a file
    kaleido did not write, raises `RuntimeError` starting with `what` (the option or command asking) and naming the fix.
    """
    try:
        import kaleido  # noqa: F401  (plotly's image export needs it)
        import plotly.io as pio
    except ImportError as exc:
        raise RuntimeError(f"{what}: needs kaleido>=1.0 (pip install 'hybrid-kv-toolkit[export]')") from exc
    browser = chromium_path()
    if not browser:
        raise RuntimeError(f"{what}: no Chromium found; install Debian's chromium or set BROWSER_PATH")
    paths = [Path(path) for _, path in figures]
    if not figures:
        return paths
    figs = [pio.from_json(json.dumps(figure)) for figure, _ in figures]
    heights = [figure.get("layout", {}).get("height") or 450 for figure, _ in figures]
    with scoped_env(BROWSER_PATH=browser):  # kaleido starts the browser while it writes
        pio.write_images(figs, paths, width=width, height=heights)
        for fig, path, height in zip(figs, paths, heights):  # a render the browser dropped: once more, alone
            if not path.exists():
                pio.write_image(fig, path, width=width, height=height)
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise RuntimeError(f"{what}: kaleido wrote no file for {', '.join(missing)} (browser {browser})")
    return paths
