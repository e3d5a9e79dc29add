"""The recorder drives the core OffloadManager through a synthetic trace and writes a valid recording."""

from __future__ import annotations

from toolkit.core.events import BlockEvicted, StoreSent
from toolkit.viz.recorder import normalise_events, record_synthetic_run
from toolkit.viz.recording import load_recording
from toolkit.viz.state_model import CacheStateModel


def test_synthetic_run_is_valid_deterministic_and_eventful(tmp_path):
    path = record_synthetic_run(tmp_path / "run.jsonl", num_steps=24)
    rec = load_recording(path)  # validates every step's pool invariants
    assert rec.num_steps == 24 and [g["name"] for g in rec.groups] == ["attn", "swa", "mamba"]
    assert rec == record_synthetic_run(None, num_steps=24)
    kinds = {e["kind"] for s in rec.steps for e in s["events"]}
    assert {"store", "handoff", "drop", "lookup", "load", "complete"} <= kinds
    model = CacheStateModel(rec)
    assert any(p.num_in_flight for k in range(24) for p in model.view(k).pools)
    assert any(p.num_pinned for k in range(24) for p in model.view(k).pools)
    # r1 extends r0's 40-token prompt: fine-grained, it hits r0's last hash boundary, 32 tokens
    model.select("r1-AB")
    r = model.view(23).request
    assert r.joint_hit_tokens == 32 and r.boundaries == (32, 32, 32) and r.prompt_tokens == 80


def test_block_aligned_run_stops_on_scheduler_blocks():
    model = CacheStateModel(record_synthetic_run(None, num_steps=24, fine_grained=False))
    rows = model.all_boundary_rows()
    assert rows and all(r["joint_hit_tokens"] % 64 == 0 for r in rows)
    assert {r["joint_hit_tokens"] for r in rows if r["req_id"] == "r1-AB"} == {0}


def test_core_events_are_split_per_group_and_evictions_merged():
    raw = [
        StoreSent(
            event_id=1,
            cpu_block_ids=(3, 4, 9),
            group_ids=(0, 0, 2),
            sources=("positional",) * 3,
            request_ids=("a",),
            device_block_ids=(1, 2, 3),
        ),
        BlockEvicted(cpu_block_id=7, group_id=1, num_keys=1),
        BlockEvicted(cpu_block_id=8, group_id=1, num_keys=1),
    ]
    out = normalise_events(raw)
    assert [(e["kind"], e["group_id"], e["block_ids"]) for e in out] == [
        ("store", 0, [3, 4]),
        ("store", 2, [9]),
        ("drop", 1, [7, 8]),
    ]
    assert out[-1]["reason"] == "evicted"
