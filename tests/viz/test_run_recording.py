"""`--record-cache-state`: a real run's CPU tier, recorded for the visualizer, bounded, and opened by the widget.

The dry run drives vLLM's real scheduler with the toolkit connector (`engine` marker); the cap tests drive the
core `OffloadManager` through the core's engine simulator, the same subscriber watching it.
"""

from __future__ import annotations

import json
import stat

import pytest

from toolkit.errors import BadInput
from toolkit.viz.recorder import DEFAULT_GROUPS
from toolkit.viz.run_recorder import RecordingCaps, RunRecorder
from toolkit.viz.state_model import CacheStateModel
from toolkit.viz.widget import CacheStateWidget


@pytest.mark.engine
def test_dry_run_writes_a_bounded_recording_the_widget_opens(tmp_path):
    from toolkit.experiments import ExperimentConfig, run_experiment

    config = ExperimentConfig(
        engine="dry", trace="fewshot-small", phases=("cold", "hot"), cpu_gib=0.05, record_cache_state=True
    )
    result = run_experiment(config.replace(out=str(tmp_path / "run")))
    path = result.run_dir / "cache_state.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    caps = RecordingCaps()
    assert path.stat().st_size <= caps.max_bytes + 64 * 1024  # the byte cap, and one header
    model = CacheStateModel.from_run_dir(result.run_dir)
    header = model.recording.header
    assert header["caps"] == {
        "max_steps": 1000,
        "max_bytes": 8 * 2**20,
        "max_events_per_step": 40,
        "max_listed_blocks": 64,
        "max_requests": 200,
    }
    assert header["truncated"] is None and 0 < model.num_steps <= caps.max_steps
    steps = model.recording.steps
    assert [s["phase"] for s in steps] == sorted((s["phase"] for s in steps), key=["cold", "hot"].index)
    assert all(a["connector_step"] < b["connector_step"] for a, b in zip(steps, steps[1:]))
    assert any(e["kind"] == "store" for s in steps for e in s["events"])
    # The recording agrees with the run's own records: each hot request's last lookup ends where vLLM's
    # computed prefix did (device-local plus loaded tokens).
    last = {r["req_id"]: r for s in steps if s["phase"] == "hot" for r in s["requests"]}
    hot = result.requests.filter(result.requests["phase"] == "hot").to_dicts()
    assert hot and all(r["external_hit_tokens"] > 0 for r in hot)
    for rec in hot:
        looked_up = last[f"hot:{rec['request_id']}"]
        assert looked_up["joint_hit_tokens"] == rec["local_hit_tokens"] + rec["external_hit_tokens"], rec
    widget = CacheStateWidget(model)
    widget.show_busiest_step()
    busiest = model.busiest_step()
    assert widget.slider.value == busiest and busiest > 0
    assert f"at step {busiest} (the busiest step" in widget.snapshot_html()
    assert f"(phase {steps[busiest]['phase']}, connector step" in model.status_lines()[0]


def _core_run(path, caps: RecordingCaps | None = None, num_steps: int = 30):
    """The core manager driven by the core's engine simulator through the cache-state prompts, recorded."""
    from toolkit.core import DeviceBlockPoolModel, HybridGeometry, OffloadConfig, OffloadManager, parse_groups_spec
    from toolkit.core.sim import SimEngine
    from toolkit.workloads.cache_state import cache_state_prompts

    geo = HybridGeometry(groups=parse_groups_spec(DEFAULT_GROUPS), hash_block_tokens=16, allow_fine_grained=True)
    device = DeviceBlockPoolModel(96)
    manager = OffloadManager(geometry=geo, device_pool=device, config=OffloadConfig(num_cpu_blocks=40))
    engine = SimEngine(manager, device, chunk_tokens=64, completion_delay_steps=1)
    recorder = RunRecorder(manager, path, source="core simulator", caps=caps)
    trace = cache_state_prompts(num_requests=8, segment_tokens=40)
    for k in range(num_steps):
        if k % 3 == 0 and k // 3 < len(trace.requests):
            request = trace.requests[k // 3]
            engine.add_request(request.request_id, trace.prompt_token_ids(request), num_decode_tokens=2)
        recorder.phase = "cold" if k < num_steps // 2 else "hot"
        engine.step()
    return recorder, recorder.close()


def test_caps_bound_the_recording_and_say_so(tmp_path):
    _, whole = _core_run(tmp_path / "whole.jsonl")
    full = CacheStateModel.from_path(whole)
    caps = RecordingCaps(max_steps=6, max_events_per_step=3, max_listed_blocks=2)
    recorder, path = _core_run(tmp_path / "capped.jsonl", caps)
    model = CacheStateModel.from_path(path)
    assert full.num_steps > 6 and model.num_steps == 6
    assert "the cap of 6 recorded steps was reached" in model.recording.header["truncated"]
    assert model.status_lines()[-1].startswith("recording: recording stopped at connector step")
    # Lists keep their first ids, the counts stay whole: the widget's counts are the uncapped run's.
    for k in range(6):
        for capped, whole_pool in zip(model.view(k).pools, full.view(k).pools):
            assert (capped.num_evictable, capped.num_pinned, capped.num_in_flight) == (
                whole_pool.num_evictable,
                whole_pool.num_pinned,
                whole_pool.num_in_flight,
            )
            assert len(capped.lru_block_ids) <= 2
    events = [e for k in range(6) for e in model.view(k).events]
    assert all(len(e["block_ids"]) <= 2 for e in events)
    assert any(e["kind"] == "note" and "more events not recorded (cap 3 a step)" in e["reason"] for e in events)
    assert recorder.manager.observer is None  # closing unsubscribed it

    _, by_bytes = _core_run(tmp_path / "bytes.jsonl", RecordingCaps(max_bytes=4096))
    header = json.loads(by_bytes.read_text().splitlines()[0])
    assert "the cap of 4,096 bytes was reached" in header["truncated"]
    assert len(by_bytes.read_bytes()) - len(by_bytes.read_text().splitlines()[0]) <= 4096 + 1


def test_snapshot_shows_the_busiest_step_not_an_empty_pool(tmp_path):
    _, path = _core_run(tmp_path / "run.jsonl")
    model = CacheStateModel.from_path(path)
    moved = [sum(1 + len(e["block_ids"]) for e in model.view(k).events) for k in range(model.num_steps)]
    busiest = model.busiest_step()
    assert moved[busiest] == max(moved) and moved[busiest] > moved[0]
    assert sum(p.num_used_blocks for p in model.view(busiest).pools) > 0
    widget = CacheStateWidget(model)
    assert "at step 0 " in widget.snapshot_html()
    widget.show_busiest_step()
    assert f"at step {busiest} (the busiest step: its events moved the most blocks)" in widget.snapshot_html()
    assert f"step {busiest} of {model.num_steps - 1}" in widget.status.value


def test_a_run_folder_without_a_recording_says_how_to_make_one(tmp_path):
    with pytest.raises(BadInput, match="run_dir: .* holds no cache_state.jsonl; record a run with `kvtk replay"):
        CacheStateModel.from_run_dir(tmp_path)
