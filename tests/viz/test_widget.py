"""The widget over the model: moving the slider, the buttons and the picker redraw what the model says."""

from __future__ import annotations

import pytest

from toolkit.locations import data_dir
from toolkit.viz.state_model import CacheStateModel
from toolkit.viz.widget import CacheStateWidget

HANDMADE = data_dir() / "runs" / "handmade_cache_state.jsonl"


@pytest.fixture
def widget():
    return CacheStateWidget.from_path(HANDMADE)


def bars(fig):
    return {trace.name: dict(zip(trace.y, trace.x)) for trace in fig.data}


def test_slider_drives_status_and_pool_figure(widget):
    reference = CacheStateModel.from_path(HANDMADE)
    for k in (3, 6, 0, 7):
        widget.slider.value = k  # as a user's drag would
        assert widget.model.step == k
        for line in reference.status_lines(k):
            assert line in widget.status.value
        shown = bars(widget.pool_figure)
        view = reference.view(k)
        for pool in view.pools:
            assert shown["evictable"][pool.name] == pool.num_evictable
            assert shown["pinned"][pool.name] == pool.num_pinned
            assert shown["in flight"][pool.name] == pool.num_in_flight
        assert shown["free"]["free"] == view.num_free_blocks
        assert f"step {k}" in widget.pool_figure.layout.title.text


def test_buttons_step_and_stop_at_the_ends(widget):
    widget.next_button.click()
    widget.next_button.click()
    assert widget.slider.value == 2 and "step 2 of 7" in widget.status.value
    widget.prev_button.click()
    assert widget.slider.value == 1
    widget.slider.value = 7
    widget.next_button.click()
    assert widget.slider.value == 7
    assert widget.play.max == widget.slider.max == 7


def test_request_picker_redraws_the_lanes(widget):
    widget.slider.value = 7
    assert widget.lanes_figure is not None
    assert list(widget.lanes_figure.data[1].x) == [0, 64, 64]  # r0: attention evicted at step 6
    widget.request_picker.value = "r1"
    assert "request r1: joint hit 64 of 128 tokens" in widget.status.value
    assert list(widget.lanes_figure.data[1].x) == [64, 64, 64]
    widget.slider.value = 0
    assert widget.lanes_figure is None and "not looked up yet" in widget.status.value


def test_events_and_lru_tables_show_the_step(widget):
    widget.slider.value = 6
    assert widget.events.value.count("<b>drop</b>") == 2 and "evicted" in widget.events.value
    assert "3 4 7 8" in widget.lru.value  # attention's evictable blocks, next victim first
    widget.slider.value = 0
    assert "no events" in widget.events.value
