"""Traces: generators are seeded and shaped as documented; the parser is strict; writer and recorder round-trip."""

from __future__ import annotations

import json
import re

import pytest

from toolkit.workloads.generators import agentic, few_shot, long_document
from toolkit.workloads.resolve import committed_traces, generate, resolve_trace
from toolkit.workloads.trace_parser import load_trace, parse_lines
from toolkit.workloads.traces import TraceError, TraceRecorder, iter_lines, write_trace


def test_few_shot_requests_share_the_prefix_and_differ_after_it():
    t = few_shot(num_requests=5, prefix_tokens=300, question_tokens=20, seed=3)
    prompts = [t.prompt_token_ids(r) for r in t.requests]
    assert all(len(p) == 320 for p in prompts)
    assert all(p[:300] == prompts[0][:300] for p in prompts)
    assert len({tuple(p[300:]) for p in prompts}) == 5
    assert all(3 <= tok < t.vocab_size for p in prompts for tok in p)


def test_generators_are_deterministic_and_seed_dependent():
    assert [few_shot(seed=1).prompt_token_ids(r) for r in few_shot(seed=1).requests][:2] == [
        few_shot(seed=1).prompt_token_ids(r) for r in few_shot(seed=1).requests
    ][:2]
    a, b = few_shot(seed=1), few_shot(seed=2)
    assert a.prompt_token_ids(a.requests[0]) != b.prompt_token_ids(b.requests[0])


def test_agentic_turn_extends_the_previous_turn_of_its_session():
    t = agentic(num_sessions=2, num_turns=3, system_tokens=50, user_tokens=10, assistant_tokens=5)
    by_id = {r.request_id: t.prompt_token_ids(r) for r in t.requests}
    for s in range(2):
        for turn in (1, 2):
            prev, cur = by_id[f"ag-s{s}-t{turn - 1}"], by_id[f"ag-s{s}-t{turn}"]
            assert cur[: len(prev)] == prev and len(cur) == len(prev) + 15


def test_long_document_questions_share_their_document():
    t = long_document(num_docs=2, doc_tokens=100, num_questions=4, question_tokens=8)
    p = [t.prompt_token_ids(r) for r in t.requests]
    assert p[0][:100] == p[2][:100] and p[0][:100] != p[1][:100]


def test_write_then_load_round_trips(tmp_path):
    t = agentic(num_sessions=2, num_turns=2, system_tokens=40, user_tokens=8, assistant_tokens=4)
    back = load_trace(write_trace(t, tmp_path / "t.jsonl"))
    assert [back.prompt_token_ids(r) for r in back.requests] == [t.prompt_token_ids(r) for r in t.requests]
    assert [r.max_tokens for r in back.requests] == [r.max_tokens for r in t.requests]


def test_committed_traces_parse_and_exceed_the_tiny_hybrid_block():
    names = committed_traces()
    assert {"fewshot-small", "agentic-small", "longdoc-small"} <= set(names)
    for name in names:
        t = resolve_trace(name)
        assert max(t.prompt_len(r) for r in t.requests) > 1152


def test_generator_spec_and_unknown_names():
    assert len(generate("fewshot:num_requests=3,prefix_tokens=10,question_tokens=2").requests) == 3
    with pytest.raises(ValueError, match="valid: num_requests"):
        generate("fewshot:bogus=1")
    with pytest.raises(ValueError, match="committed traces: .*fewshot-small"):
        resolve_trace("no-such-trace")


def _lines(*objs):
    return [json.dumps(o) for o in objs]


HEADER = {"type": "header", "schema": "kvtk.trace/1", "name": "x", "workload": "w", "vocab_size": 100}
SEG = {"type": "segment", "segment_id": "s", "token_ids": [5, 6, 7]}
REQ = {
    "type": "request",
    "request_id": "r0",
    "arrival_s": 0.0,
    "prompt": [{"segment": "s"}, {"token_ids": [9]}],
    "max_tokens": 2,
}


@pytest.mark.parametrize(
    "bad, line, fieldname",
    [
        ({**REQ, "max_tokens": 0}, 3, "max_tokens"),
        ({**REQ, "max_tokens": "2"}, 3, "max_tokens"),
        ({**REQ, "prompt": [{"segment": "nope"}]}, 3, "prompt[0].segment"),
        ({**REQ, "prompt": [{"token_ids": [5, 500]}]}, 3, "prompt[0].token_ids"),
        ({**REQ, "arrival_s": -1}, 3, "arrival_s"),
        ({**REQ, "extra": 1}, 3, "extra"),
        ({k: v for k, v in REQ.items() if k != "request_id"}, 3, "request_id"),
        ({**SEG, "segment_id": "t", "random": {"seed": 1, "num_tokens": 2}}, 3, "token_ids"),
    ],
)
def test_parser_names_line_and_field(bad, line, fieldname):
    with pytest.raises(TraceError, match=re.escape(f"line {line}: field '{fieldname}'")):
        parse_lines(_lines(HEADER, SEG, bad))


def test_parser_refuses_bad_json_duplicates_and_a_missing_header():
    with pytest.raises(TraceError, match="line 2: not valid JSON"):
        parse_lines(_lines(HEADER) + ["{'python': 'literal'}"])
    with pytest.raises(TraceError, match="line 4: field 'request_id': duplicate"):
        parse_lines(_lines(HEADER, SEG, REQ, REQ))
    with pytest.raises(TraceError, match="line 1: field 'type'"):
        parse_lines(_lines(SEG))
    with pytest.raises(TraceError, match="line 3: field 'arrival_s': arrivals must not decrease"):
        parse_lines(
            _lines(
                HEADER,
                {**REQ, "prompt": [{"token_ids": [4]}], "arrival_s": 2},
                {**REQ, "request_id": "r1", "prompt": [{"token_ids": [4]}], "arrival_s": 1},
            )
        )


def test_recorder_writes_segments_and_inline_rest(tmp_path):
    rec = TraceRecorder("rec", "fewshot", 100)
    rec.add_segment("shared", [5, 6, 7, 8])
    rec.record("a", [5, 6, 7, 8, 9, 10], 3)
    rec.record("b", [11, 12], 1, arrival_s=0.5)
    back = load_trace(rec.save(tmp_path / "r.jsonl"))
    assert back.requests[0].parts == ("shared", (9, 10))
    assert [back.prompt_token_ids(r) for r in back.requests] == [[5, 6, 7, 8, 9, 10], [11, 12]]
    assert list(iter_lines(back))[0].startswith('{"type": "header"')
