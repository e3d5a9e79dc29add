"""Figures and the cache-state visualizer.

- `geometry`, `boundaries`, `pool`, `bandwidth`: pure functions from results (polars frames or rows) to plotly
  figures, shared by the notebooks, the widget and the HTML reports.
- `recording`: the cache-state recording format (JSON Lines, schema `kvtk.cache_state/1`).
- `state_model`: `CacheStateModel`, the state for step k of a recording (no drawing; unit-tested).
- `widget`: `CacheStateWidget`, the ipywidgets front end over the model.
- `recorder`: produces a recording by driving the core offload manager through a synthetic trace.

Submodules import plotly/polars/ipywidgets themselves; importing `toolkit.viz` alone imports nothing heavy.
"""
