"""`kvtk notebooks --png`: every figure of an executed notebook as a PNG (plotly + kaleido + Debian's chromium)."""

from __future__ import annotations

import importlib.util
import struct

import pytest

from toolkit.notebooks_runner import PNG_WIDTH, chromium_path, export_pngs, notebook_figures

pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(
        importlib.util.find_spec("kaleido") is None or chromium_path() is None,
        reason="needs kaleido (the 'export' extra) and a Chromium",
    ),
]


def test_png_per_figure_at_the_figure_size(smoke_run, tmp_path):
    run_dir, _, _ = smoke_run
    ipynb = run_dir / "01_block_geometry.ipynb"
    figures = notebook_figures(ipynb)
    paths = export_pngs(ipynb, tmp_path / "figures")
    assert [p.name for p in paths] == [f"01_block_geometry-{i:02d}.png" for i in range(len(figures))]
    for path, fig in zip(paths, figures):
        head = path.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", head[16:24])
        assert (width, height) == (PNG_WIDTH, fig["layout"].get("height") or 450), path.name
