"""Property: any file handed to the trace readers (kvtk format, Mooncake) either parses into a trace within the
caps, or is refused with one line naming the file and the line, quickly, without materialising anything big."""

from __future__ import annotations

import json
import math

from fuzz_helpers import FUZZ, assert_one_line
from hypothesis import given
from hypothesis import strategies as st

from toolkit import limits
from toolkit.workloads.mooncake import load_mooncake
from toolkit.workloads.trace_parser import load_trace
from toolkit.workloads.traces import TraceError

# Values a hostile or broken file puts in a field: edge numbers, NaN/inf, path-like names, wrong types.
EDGE_INTS = st.sampled_from([0, 1, -1, 3, 2**20, 2**20 + 1, 2**31, 2**63, 10**12, 2 * 10**9])
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 0.5, -1.0, 1e300, math.nan, math.inf, -math.inf])
NAMES = st.sampled_from(
    ["ok", "..", "../../etc", "a/b", "/abs", ".hidden", "a\\b", "x" * 300, "", "a\x00b", "good-name_1.2"]
)
SCALARS = st.one_of(EDGE_INTS, EDGE_FLOATS, NAMES, st.booleans(), st.none(), st.integers(-5, 5))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(NAMES, inner, max_size=3)),
    max_leaves=8,
)

HEADER = {"type": "header", "schema": "kvtk.trace/1", "name": "t", "workload": "w", "vocab_size": 64}
SEGMENT = {"type": "segment", "segment_id": "s", "random": {"seed": 1, "num_tokens": 8}}
REQUEST = {
    "type": "request",
    "request_id": "r0",
    "arrival_s": 0.0,
    "prompt": [{"segment": "s"}, {"token_ids": [5]}],
    "max_tokens": 2,
}


@st.composite
def mutated(draw, base: dict) -> dict:
    obj = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["set", "drop", "add", "nested"]))
        key = draw(st.sampled_from(sorted(obj)))
        if action == "set":
            obj[key] = draw(VALUES)
        elif action == "drop":
            obj.pop(key, None)
        elif action == "add":
            obj[draw(NAMES)] = draw(VALUES)
        elif isinstance(obj.get(key), dict) and obj[key]:
            obj[key][draw(st.sampled_from(sorted(obj[key])))] = draw(VALUES)
    return obj


def _text(obj) -> str:
    return json.dumps(obj)  # NaN and Infinity come out as the bare literals a hostile file would hold


RAW_LINES = st.sampled_from(
    ["", "{", "[1, 2]", "null", '{"type": "request"', '{"a": 1, "a": 2}', "[" * 5000 + "]" * 5000, '{"type": NaN}']
)


@st.composite
def kvtk_files(draw) -> bytes:
    lines = [_text(draw(mutated(HEADER)))]
    for _ in range(draw(st.integers(0, 2))):
        lines.append(_text(draw(mutated(SEGMENT))))
    for i in range(draw(st.integers(0, 3))):
        lines.append(_text(draw(mutated({**REQUEST, "request_id": f"r{i}", "arrival_s": float(i)}))))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(RAW_LINES))
    data = ("\n".join(lines) + "\n").encode()
    if draw(st.integers(0, 9)) == 0:
        data = data.replace(b"w", b"\xff\xfe", 1)  # not UTF-8
    return data


def _check_refusal(exc: Exception, path) -> None:
    message = str(exc)
    assert_one_line(message)
    assert str(path) in message
    assert "line " in message or "empty" in message or "no requests" in message


def _parsed_or_refused(loader, path, data: bytes):
    """The trace `loader` reads from `data` written at `path`, or None once its refusal was checked."""
    path.write_bytes(data)
    try:
        return loader(path)
    except TraceError as exc:
        _check_refusal(exc, path)
        return None


def _assert_arrivals_finite_and_ordered(requests) -> None:
    last = 0.0
    for r in requests:
        assert math.isfinite(r.arrival_s) and last <= r.arrival_s <= limits.MAX_ARRIVAL_S
        last = r.arrival_s


@FUZZ
@given(data=kvtk_files())
def test_kvtk_trace_files_parse_within_caps_or_are_refused_on_one_line(tmp_path_factory, data):
    trace = _parsed_or_refused(load_trace, tmp_path_factory.mktemp("t") / "trace.jsonl", data)
    if trace is None:
        return
    limits.check_name(trace.name, "name")
    _assert_arrivals_finite_and_ordered(trace.requests)
    for r in trace.requests:
        assert 1 <= r.max_tokens <= limits.MAX_OUTPUT_TOKENS
        assert trace.prompt_len(r) <= limits.MAX_PROMPT_TOKENS
    assert sum(len(s) for s in trace.segments.values()) <= limits.MAX_TRACE_TOKENS


MOONCAKE = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}


@st.composite
def mooncake_files(draw) -> bytes:
    lines = []
    for i in range(draw(st.integers(1, 3))):
        obj = draw(mutated({**MOONCAKE, "timestamp": i}))
        if draw(st.integers(0, 4)) == 0:  # a long hash_ids list, the 25 GiB prompt of the issue in miniature
            obj["hash_ids"] = list(range(draw(st.sampled_from([2049, 10**5]))))
            obj["input_length"] = len(obj["hash_ids"]) * 512
        lines.append(_text(obj))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(RAW_LINES))
    return ("\n".join(lines) + "\n").encode()


@FUZZ
@given(data=mooncake_files())
def test_mooncake_files_parse_within_caps_or_are_refused_on_one_line(tmp_path_factory, data):
    trace = _parsed_or_refused(load_mooncake, tmp_path_factory.mktemp("m") / "mc.jsonl", data)
    if trace is None:
        return
    _assert_arrivals_finite_and_ordered(trace.requests)
    for r in trace.requests:
        assert 1 <= r.input_length <= limits.MAX_PROMPT_TOKENS and 1 <= r.max_tokens <= limits.MAX_OUTPUT_TOKENS
        assert len(r.hash_ids) == -(-r.input_length // 512)
