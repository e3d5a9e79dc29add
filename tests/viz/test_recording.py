"""The recording format: the committed hand-made run parses, bad records are refused with line and field."""

from __future__ import annotations

import copy
import json

import pytest

from toolkit.locations import data_dir
from toolkit.viz.recording import RecordingError, dump_recording, from_records, load_recording

HANDMADE = data_dir() / "runs" / "handmade_cache_state.jsonl"


def records():
    return [json.loads(line) for line in HANDMADE.read_text().splitlines()]


def test_handmade_recording_parses_and_round_trips(tmp_path):
    rec = load_recording(HANDMADE)
    assert rec.num_steps == 8 and [g["name"] for g in rec.groups] == ["attn", "swa", "gdn"]
    dump_recording(rec, tmp_path / "copy.jsonl")
    assert load_recording(tmp_path / "copy.jsonl") == rec


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda r: r[0].update(schema="other/1"), "schema"),
        (lambda r: r[2].update(step=5), "step=1"),
        (lambda r: r[3]["pool"].update(num_free_blocks=0), "!= num_cpu_blocks 19"),
        (
            lambda r: r[3]["pool"]["groups"][0]["pinned_block_ids"].append(
                r[3]["pool"]["groups"][0]["lru_block_ids"][0]
            ),
            "appears twice",
        ),
        (lambda r: r[1]["requests"][0].update(joint_hit_tokens=10), "joint_hit_tokens"),
        (lambda r: r[1]["requests"][0]["boundaries"].pop(), "'boundaries' needs 3"),
        (lambda r: r[2]["events"].append({"kind": "drop", "group_id": 7}), "group_id 7 out of range"),
    ],
)
def test_bad_recordings_are_refused_with_the_line(break_it, message):
    broken = copy.deepcopy(records())
    break_it(broken)
    with pytest.raises(RecordingError, match=message):
        from_records(broken)


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(HANDMADE.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(RecordingError, match="line 2"):
        load_recording(path)
