"""`mooncake-tiled:COPIES:PATH`: the trace end to end on disjoint block ids, arrivals shifted, ids continued."""

from pathlib import Path

import pytest

from toolkit.workloads.mooncake import parse_mooncake_lines
from toolkit.workloads.mooncake_tiled import tile_mooncake
from toolkit.workloads.resolve import resolve_trace

LINES = [
    '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}',
    '{"timestamp": 1000, "input_length": 1100, "output_length": 2, "hash_ids": [0, 1, 2]}',
    '{"timestamp": 3000, "input_length": 10, "output_length": 1, "hash_ids": [5]}',
]


def test_copies_share_no_block_and_start_one_mean_gap_after_the_last_arrival():
    base = parse_mooncake_lines(LINES)
    tiled = tile_mooncake(base, 3)
    assert [r.request_id for r in tiled.requests] == [f"mc-{i}" for i in range(1, 10)]
    assert [r.arrival_s for r in tiled.requests] == [0.0, 1.0, 3.0, 4.5, 5.5, 7.5, 9.0, 10.0, 12.0]
    ids = [set(r.hash_ids) for r in tiled.requests]
    assert ids[3] == {6, 7} and ids[6] == {12, 13}
    assert not (set().union(*ids[:3]) & set().union(*ids[3:6]))
    # Within a copy the sharing is the original's: the same prefix, the same tokens.
    first, fourth, fifth = (tiled.prompt_token_ids(tiled.requests[i]) for i in (3, 3, 4))
    assert fifth[:600] == first and fourth == tiled.prompt_token_ids(tiled.requests[3])
    assert [tiled.prompt_len(r) for r in tiled.requests] == [600, 1100, 10] * 3
    assert tiled.prompt_token_ids(tiled.requests[0]) == base.prompt_token_ids(base.requests[0])


def test_spec_resolves_and_checks_its_parts(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    trace = resolve_trace(f"mooncake-tiled:2:{path}", max_requests=5)
    assert len(trace.requests) == 5 and trace.requests[-1].request_id == "mc-5"
    with pytest.raises(ValueError, match="COPIES"):
        resolve_trace(f"mooncake-tiled:x:{path}")
    with pytest.raises(ValueError, match="copies"):
        resolve_trace(f"mooncake-tiled:0:{path}")
    with pytest.raises(FileNotFoundError):
        resolve_trace(f"mooncake-tiled:2:{tmp_path}/missing.jsonl")
