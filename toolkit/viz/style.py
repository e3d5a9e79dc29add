"""Shared colours and layout defaults so every figure reads the same way."""

from __future__ import annotations

STATE_COLORS = {
    "evictable": "#4C78A8",
    "pinned": "#F58518",
    "in flight": "#B279A2",
    "other": "#9D755D",
    "free": "#E5E5E5",
}
EVENT_COLORS = {"store": "#4C78A8", "load": "#54A24B", "handoff": "#B279A2", "drop": "#E45756"}
JOINT_HIT_COLOR = "#E45756"
TEMPLATE = "plotly_white"


def frame(rows_or_frame):
    """Accept a polars DataFrame or a list of row dicts; return a DataFrame."""
    import polars as pl

    if isinstance(rows_or_frame, pl.DataFrame):
        return rows_or_frame
    return pl.DataFrame(list(rows_or_frame))
