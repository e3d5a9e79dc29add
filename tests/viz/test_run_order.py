"""Phases in run order everywhere: a run folder read back, the figures' frames, the style's ordering."""

from __future__ import annotations

import polars as pl

from toolkit.experiments.results import phase_files
from toolkit.viz.style import group_names, ordered_phases, sort_phases


def _folder(tmp_path, names):
    for name in names:
        pl.DataFrame({"x": [1]}).write_parquet(tmp_path / f"phase-{name}.parquet")
    return tmp_path


def test_run_folder_phases_come_back_in_the_order_they_ran(tmp_path):
    folder = _folder(tmp_path, ["toolkit-cold", "toolkit-hot", "toolkit-replay", "corrupted_kv-hot"])
    ran = [{"variant": "toolkit", "phase": p} for p in ("cold", "hot")] + [
        {"variant": "corrupted_kv", "phase": "hot"},
        {"variant": "toolkit", "phase": "replay"},
    ]
    assert [p.stem for p in phase_files(folder, {"phases": ran})] == [
        "phase-toolkit-cold",
        "phase-toolkit-hot",
        "phase-corrupted_kv-hot",
        "phase-toolkit-replay",
    ]
    # no summary yet (a run killed half-way): phases in run order, not hot before cold
    assert [p.stem for p in phase_files(folder)] == [
        "phase-corrupted_kv-hot",
        "phase-toolkit-cold",
        "phase-toolkit-hot",
        "phase-toolkit-replay",
    ]
    (folder / "params.json").write_text("{}")
    assert len(phase_files(folder, None)) == 4  # only the phase files


def test_frames_sort_by_variant_as_run_then_phase():
    df = pl.DataFrame(
        {
            "variant": ["toolkit", "toolkit", "simplecpu", "toolkit", "simplecpu"],
            "phase": ["replay", "cold", "hot", "pressure", "cold"],
            "v": [1, 2, 3, 4, 5],
        }
    )
    out = sort_phases(df)
    assert out.select("variant", "phase").rows() == [
        ("toolkit", "cold"),
        ("toolkit", "pressure"),
        ("toolkit", "replay"),
        ("simplecpu", "cold"),
        ("simplecpu", "hot"),
    ]
    assert ordered_phases(["replay", "custom", "hot", "cold"]) == ["cold", "hot", "replay", "custom"]


def test_group_names_are_kinds_numbered_only_when_repeated():
    assert group_names(["FullAttentionSpec", "MambaSpec", "MambaSpec", "SlidingWindowSpec"]) == [
        "full attention",
        "mamba 1",
        "mamba 2",
        "sliding window",
    ]
