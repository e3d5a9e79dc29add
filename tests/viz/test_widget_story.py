"""What the visualizer tells at a glance: a pool axis fixed at capacity, the null block named, groups by name, a
cursor on the timeline, in-flight stores said as such, and a static snapshot for HTML reports."""

from __future__ import annotations

import pytest

from toolkit.locations import data_dir
from toolkit.viz.recorder import record_synthetic_run
from toolkit.viz.state_model import CacheStateModel
from toolkit.viz.widget import CacheStateWidget

HANDMADE = data_dir() / "runs" / "handmade_cache_state.jsonl"


@pytest.fixture(scope="module")
def synthetic():
    return CacheStateModel(record_synthetic_run(None, num_steps=12, num_cpu_blocks=40))


def test_pool_axis_stays_at_capacity_and_names_the_null_block(synthetic):
    widget = CacheStateWidget(synthetic)
    ranges = set()
    for k in range(synthetic.num_steps):
        widget.slider.value = k
        ranges.add(tuple(widget.pool_figure.layout.xaxis.range))
        mark = widget.pool_figure.layout.shapes[0]
        assert mark.x0 == mark.x1 == 39  # 40 configured, block 0 is the null block
    assert len(ranges) == 1 and ranges.pop()[1] >= 39
    assert "+1 null block" in widget.status.value
    assert "+1 null block" in widget.pool_figure.layout.annotations[0].text


def test_lanes_grid_on_scheduler_and_hash_blocks(synthetic):
    widget = CacheStateWidget(synthetic)
    widget.slider.value = synthetic.num_steps - 1
    geometry = synthetic.recording.header["geometry"]
    axis = widget.lanes_figure.layout.xaxis
    assert axis.dtick == geometry["scheduler_block_tokens"] and axis.minor.dtick == geometry["hash_block_tokens"]


def test_timeline_cursor_follows_the_step(synthetic):
    widget = CacheStateWidget(synthetic)
    widget.slider.value = 5
    cursor = widget.timeline_figure.layout.shapes[0]
    assert cursor.x0 == cursor.x1 == 5
    widget.next_button.click()
    assert widget.timeline_figure.layout.shapes[0].x0 == 6


def test_events_name_groups_and_an_in_flight_store_is_said(synthetic):
    widget = CacheStateWidget(synthetic)
    store_step = next(
        k
        for k in range(synthetic.num_steps)
        if any(
            e["kind"] == "store" and e["req_id"] == widget.model.req_id for e in synthetic.recording.steps[k]["events"]
        )
    )
    widget.slider.value = store_step
    assert "<td>attn</td>" in widget.events.value and "<td>0</td>" not in widget.events.value
    in_flight, _ = synthetic.store_state(widget.model.req_id, 0, store_step)
    assert in_flight > 0 and "store in flight" in widget.status.value
    assert "never_stored" in widget.status.value  # the lookup's reason stays, with what happened since
    widget.slider.value = store_step + 1  # the store completed
    assert "store in flight" not in widget.status.value and "since then: stored" in widget.status.value


def test_static_snapshot_carries_the_step():
    widget = CacheStateWidget.from_path(HANDMADE)
    widget.slider.value = 6
    html = widget._repr_mimebundle_()["text/html"]
    assert "at step 6" in html and widget.model.status_lines()[0] in html
    assert html.count("Plotly.newPlot") == len(widget.shown_figures()) == 3
    assert "<b>drop</b>" in html
