"""The Mooncake trace importer: token ids from block ids, strict line checks, subsets, bounded memory."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from toolkit.experiments.runner import phase_prompts
from toolkit.workloads.mooncake import MooncakeTrace, load_mooncake, parse_mooncake_lines
from toolkit.workloads.resolve import resolve_trace
from toolkit.workloads.traces import TraceError

SHARED_TRACE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"


def _line(timestamp=0, input_length=600, output_length=2, hash_ids=(0, 1), **extra) -> str:
    return json.dumps(
        {
            "timestamp": timestamp,
            "input_length": input_length,
            "output_length": output_length,
            "hash_ids": list(hash_ids),
            **extra,
        }
    )


def _write(tmp_path: Path, lines: list[str], name: str = "mc.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_shared_block_ids_share_exactly_those_prefixes():
    trace = parse_mooncake_lines(
        [_line(0, 600, 2, (0, 1)), _line(10, 1024, 3, (0, 2)), _line(25, 1000, 1, (0, 1)), _line(30, 512, 1, (7,))]
    )
    a, b, c, d = (trace.prompt_token_ids(r) for r in trace.requests)
    assert [len(x) for x in (a, b, c, d)] == [600, 1024, 1000, 512]
    assert a[:512] == b[:512]  # block 0 shared
    assert a[512] != b[512] or a[513:520] != b[513:520]  # blocks 1 and 2 differ from their first tokens on
    assert sum(x == y for x, y in zip(a[512:600], b[512:600])) < 10  # ... and nowhere systematically
    assert c[:600] == a  # the last block of `a` is block 1 cut to 88 tokens
    assert d[:16] != a[:16]  # an unrelated block shares no hash unit with block 0
    assert all(3 <= t < trace.vocab_size for t in a + b + c + d)
    assert [r.arrival_s for r in trace.requests] == [0.0, 0.01, 0.025, 0.03]
    assert [r.max_tokens for r in trace.requests] == [2, 3, 1, 1]
    # Deterministic: the same ids give the same tokens in another parse; another seed gives other tokens.
    again = parse_mooncake_lines([_line(5, 600, 2, (0, 1))])
    assert again.prompt_token_ids(again.requests[0]) == a
    other = parse_mooncake_lines([_line(5, 600, 2, (0, 1))], seed=1)
    assert other.prompt_token_ids(other.requests[0]) != a


def test_block_tokens_are_the_prompt_tokens():
    trace = parse_mooncake_lines([_line(0, 1030, 1, (4, 9, 11))])
    tokens = trace.prompt_token_ids(trace.requests[0])
    assert tokens == trace.block_token_ids(4) + trace.block_token_ids(9) + trace.block_token_ids(11)[:6]


@pytest.mark.parametrize(
    "line, lineno, field",
    [
        ("not json", 2, None),
        ("[1, 2]", 2, None),
        ("", 2, None),
        (json.dumps({"timestamp": 1, "input_length": 10, "output_length": 1}), 2, "hash_ids"),
        (_line(extra_field=1), 2, "extra_field"),
        (_line(timestamp=-1), 2, "timestamp"),
        (_line(timestamp="5"), 2, "timestamp"),
        (_line(input_length=0, hash_ids=()), 2, "input_length"),
        (_line(output_length=0), 2, "output_length"),
        (_line(output_length=True), 2, "output_length"),
        (_line(input_length=600, hash_ids=(0,)), 2, "hash_ids"),
        (_line(hash_ids=(0, -1)), 2, "hash_ids"),
        (_line(hash_ids=(0, "1")), 2, "hash_ids"),
        (json.dumps({"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": 3}), 2, "hash_ids"),
    ],
)
def test_a_bad_line_is_refused_with_its_number_and_field(tmp_path, line, lineno, field):
    path = _write(tmp_path, [_line(timestamp=0), line, _line(timestamp=9)])
    with pytest.raises(TraceError) as info:
        load_mooncake(path)
    message = str(info.value)
    assert f"line {lineno}" in message and str(path) in message
    if field is not None:
        assert f"field {field!r}" in message


def test_decreasing_timestamps_are_refused():
    with pytest.raises(TraceError, match=r"line 2: field 'timestamp': arrivals must not decrease"):
        parse_mooncake_lines([_line(timestamp=10), _line(timestamp=9)])


def test_max_requests_and_time_scale(tmp_path):
    path = _write(tmp_path, [_line(timestamp=t * 1000) for t in range(5)] + ["a bad line after the cut"])
    trace = resolve_trace(f"mooncake:{path}", max_requests=3, time_scale=4.0)
    assert [r.arrival_s for r in trace.requests] == [0.0, 0.25, 0.5]
    assert trace.workload == "mooncake" and trace.total_prompt_tokens() == 3 * 600
    with pytest.raises(ValueError, match="time_scale"):
        resolve_trace(f"mooncake:{path}", time_scale=0)
    with pytest.raises(ValueError, match="max_requests"):
        resolve_trace(f"mooncake:{path}", max_requests=0)


def test_format_is_detected_from_the_first_line(tmp_path):
    path = _write(tmp_path, [_line(), _line(timestamp=3, hash_ids=(0, 5))])
    trace = resolve_trace(str(path))
    assert isinstance(trace, MooncakeTrace) and len(trace.requests) == 2
    kvtk = resolve_trace("fewshot-small", max_requests=2, time_scale=2.0)
    assert not isinstance(kvtk, MooncakeTrace) and len(kvtk.requests) == 2
    with pytest.raises(FileNotFoundError):
        resolve_trace(f"mooncake:{tmp_path / 'absent.jsonl'}")


def test_phase_prompts_are_made_on_demand_so_memory_stays_bounded(tmp_path):
    # 10^5 requests of 8 blocks (4096 tokens each, 4*10^8 tokens in all): materialised token lists would need tens
    # of GiB; the trace and its phase requests must stay within a few tens of MiB.
    num = 100_000
    path = tmp_path / "big.jsonl"
    with path.open("w") as handle:
        for i in range(num):
            ids = [i % 50, 1000 + i % 7] + [10_000 + 6 * i + k for k in range(6)]
            handle.write(f'{{"timestamp": {i}, "input_length": 4096, "output_length": 1, "hash_ids": {ids}}}\n')
    tracemalloc.start()
    try:
        trace = resolve_trace(str(path))
        requests = phase_prompts(trace)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(requests) == num and trace.total_prompt_tokens() == num * 4096
    assert peak < 120 * 2**20, f"peak {peak / 2**20:.1f} MiB while loading 10^5 requests"
    assert len(requests[-1].prompt_token_ids) == 4096
    assert list(requests[-1].prompt_token_ids) == trace.prompt_token_ids(trace.requests[-1])
    assert requests[-1].arrival_s == pytest.approx((num - 1) / 1000)


def test_the_shared_synthetic_trace():
    if not SHARED_TRACE.is_file():
        pytest.skip(f"the FAST'25 synthetic Mooncake trace is not at {SHARED_TRACE} (it is not part of the repo)")
    trace = resolve_trace(str(SHARED_TRACE))
    assert len(trace.requests) == 3993
    assert trace.total_prompt_tokens() == 61_194_628
    assert trace.requests[-1].arrival_s == pytest.approx(1022.025)
    first, second = trace.requests[0], trace.requests[1]
    assert len(trace.prompt_token_ids(first)) == first.input_length == 40160
    # Requests with a common leading block id share that block's tokens; find one such pair in the first hundred.
    by_first: dict[int, list] = {}
    for r in trace.requests[:200]:
        by_first.setdefault(r.hash_ids[0], []).append(r)
    pair = next(rs for rs in by_first.values() if len(rs) > 1)
    a, b = (trace.prompt_token_ids(r) for r in pair[:2])
    assert a[:512] == b[:512]
    assert trace.prompt_token_ids(first)[:512] != trace.prompt_token_ids(second)[:512]


def test_kvtk_replay_refuses_a_bad_mooncake_line_with_exit_code_2(tmp_path, capsys):
    from toolkit.cli.main import main

    path = _write(tmp_path, [_line(), json.dumps({"timestamp": 1, "output_length": 1, "hash_ids": [0]})])
    assert main(["replay", "--trace", f"mooncake:{path}", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mooncake line 2: field 'input_length': missing" in err[0]
    assert main(["replay", "--trace", f"mooncake:{path}", "--time-scale", "0", "--out", str(tmp_path / "r")]) == 2
    assert "time_scale" in capsys.readouterr().err
