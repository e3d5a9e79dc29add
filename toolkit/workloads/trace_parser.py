"""The strict parser of `kvtk.trace/1` (the schema is in `traces.py`): one line at a time, caps checked first.

`parse_lines` reads the header, then dispatches each line to the reader of its `type` (`_segment`, `_request`);
the readers check every field (keys, types, ranges, references) and raise `TraceError` naming the line and the
field. `json_object_line` and the field readers are shared with the Mooncake parser (`mooncake.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from toolkit import limits
from toolkit.strict_load import StrictLoadError, json_loads
from toolkit.strict_load import iter_lines as _bounded_lines
from toolkit.workloads.traces import FIRST_TOKEN_ID, SCHEMA, Trace, TraceError, TraceRequest, segment_tokens


def _fail(lineno: int, fieldname: str, message: str) -> TraceError:
    return TraceError(f"trace line {lineno}: field {fieldname!r}: {message}")


def json_object_line(line: str, lineno: int, *, label: str = "trace") -> dict[str, Any]:
    """One JSONL line as a JSON object, or `TraceError` naming the line (`label` names the format)."""
    try:
        obj = json_loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{label} line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except StrictLoadError as exc:
        raise TraceError(f"{label} line {lineno}: {exc}") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{label} line {lineno}: must be a JSON object, got {type(obj).__name__}")
    return obj


def _check_keys(
    obj: dict[str, Any], lineno: int, required: set[str], optional: frozenset[str] | set[str] = frozenset()
) -> None:
    for key in sorted(required - obj.keys()):
        raise _fail(lineno, key, "missing")
    for key in sorted(obj.keys() - required - optional):
        raise _fail(lineno, key, f"unknown field (valid: {', '.join(sorted(required | optional))})")


def _int(obj: dict[str, Any], key: str, lineno: int, minimum: int, maximum: int = 2**63 - 1) -> int:
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise _fail(lineno, key, f"must be an integer in [{minimum}, {maximum}], got {value!r:.60}")
    return value


def _str(obj: dict[str, Any], key: str, lineno: int) -> str:
    value = obj[key]
    if not isinstance(value, str) or not value:
        raise _fail(lineno, key, f"must be a non-empty string, got {value!r}")
    return value


def _token_ids(value: Any, lineno: int, fieldname: str, vocab_size: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(lineno, fieldname, "must be a non-empty list of token ids")
    for i, tok in enumerate(value):
        if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok < vocab_size:
            raise _fail(lineno, fieldname, f"item {i} must be a token id in [0, {vocab_size}), got {tok!r}")
    return tuple(value)


def _hold(held: int, more: int, lineno: int, fieldname: str) -> int:
    if held + more > limits.MAX_TRACE_TOKENS:
        raise _fail(lineno, fieldname, f"the trace would hold more than {limits.MAX_TRACE_TOKENS} token ids")
    return held + more


def parse_lines(lines: Iterable[str], *, source: str = "<trace>") -> Trace:
    """Parse trace lines strictly; the first error raises `TraceError` with its line number and field."""
    trace: Trace | None = None
    seen_ids: set[str] = set()
    last_arrival = 0.0
    held_tokens = 0  # token ids materialised so far (segments and inline parts)
    for lineno, line in enumerate(lines, start=1):
        obj = json_object_line(line.rstrip("\n"), lineno)
        kind = obj.get("type")
        if trace is None:
            if kind != "header":
                raise _fail(lineno, "type", f"the first line must be the header, got {kind!r}")
            trace = _header(obj, lineno)
        elif kind == "segment":
            held_tokens = _segment(obj, lineno, trace, held_tokens)
        elif kind == "request":
            last_arrival, held_tokens = _request(obj, lineno, trace, seen_ids, last_arrival, held_tokens)
        else:
            raise _fail(lineno, "type", f"must be 'segment' or 'request' after the header, got {kind!r}")
    if trace is None:
        raise TraceError(f"trace {source}: empty (no header line)")
    return trace


def _header(obj: dict[str, Any], lineno: int) -> Trace:
    _check_keys(obj, lineno, {"type", "schema", "name", "workload", "vocab_size"}, {"params"})
    if obj["schema"] != SCHEMA:
        raise _fail(lineno, "schema", f"must be {SCHEMA!r}, got {obj['schema']!r}")
    params = obj.get("params", {})
    if not isinstance(params, dict):
        raise _fail(lineno, "params", "must be an object")
    try:
        name = limits.check_name(obj["name"], "name")
    except ValueError as exc:
        raise _fail(lineno, "name", str(exc).partition(": ")[2]) from None
    return Trace(
        name, _str(obj, "workload", lineno), _int(obj, "vocab_size", lineno, FIRST_TOKEN_ID + 1, 2**31), params=params
    )


def _segment(obj: dict[str, Any], lineno: int, trace: Trace, held_tokens: int) -> int:
    """Add one segment line's segment to `trace`; returns the token ids held after it."""
    _check_keys(obj, lineno, {"type", "segment_id"}, {"token_ids", "random"})
    seg_id = _str(obj, "segment_id", lineno)
    if seg_id in trace.segments:
        raise _fail(lineno, "segment_id", f"duplicate segment {seg_id!r}")
    if ("token_ids" in obj) == ("random" in obj):
        raise _fail(lineno, "token_ids", "give exactly one of 'token_ids' and 'random'")
    if "token_ids" in obj:
        trace.segments[seg_id] = list(_token_ids(obj["token_ids"], lineno, "token_ids", trace.vocab_size))
        held_tokens = _hold(held_tokens, len(trace.segments[seg_id]), lineno, "token_ids")
        trace.segment_specs[seg_id] = {"token_ids": trace.segments[seg_id]}
        return held_tokens
    spec = obj["random"]
    if not isinstance(spec, dict):
        raise _fail(lineno, "random", "must be an object {seed, num_tokens}")
    _check_keys(spec, lineno, {"seed", "num_tokens"})
    seed = _int(spec, "seed", lineno, 0, 2**64 - 1)
    num = _int(spec, "num_tokens", lineno, 1, limits.MAX_PROMPT_TOKENS)
    held_tokens = _hold(held_tokens, num, lineno, "random.num_tokens")
    trace.segments[seg_id] = segment_tokens(seed, num, trace.vocab_size)
    trace.segment_specs[seg_id] = {"random": {"seed": seed, "num_tokens": num}}
    return held_tokens


def _request(
    obj: dict[str, Any], lineno: int, trace: Trace, seen_ids: set[str], last_arrival: float, held_tokens: int
) -> tuple[float, int]:
    """Append one request line's request to `trace`; returns (its arrival, the token ids held after it)."""
    _check_keys(obj, lineno, {"type", "request_id", "arrival_s", "prompt", "max_tokens"})
    req_id = _str(obj, "request_id", lineno)
    if req_id in seen_ids:
        raise _fail(lineno, "request_id", f"duplicate request id {req_id!r}")
    if len(trace.requests) >= limits.MAX_TRACE_REQUESTS:
        raise _fail(lineno, "request_id", f"more than {limits.MAX_TRACE_REQUESTS} requests")
    arrival = obj["arrival_s"]
    if not limits.is_number(arrival) or not 0 <= arrival <= limits.MAX_ARRIVAL_S:
        raise _fail(
            lineno,
            "arrival_s",
            f"must be a finite number of seconds in [0, {limits.MAX_ARRIVAL_S:g}], got {arrival!r:.60}",
        )
    if arrival < last_arrival:
        raise _fail(lineno, "arrival_s", f"arrivals must not decrease ({arrival} after {last_arrival})")
    parts, held_tokens = _prompt_parts(obj["prompt"], lineno, trace, held_tokens)
    prompt_tokens = sum(len(trace.segments[p]) if isinstance(p, str) else len(p) for p in parts)
    if prompt_tokens > limits.MAX_PROMPT_TOKENS:
        raise _fail(lineno, "prompt", f"{prompt_tokens} tokens, more than the limit {limits.MAX_PROMPT_TOKENS}")
    seen_ids.add(req_id)
    trace.requests.append(
        TraceRequest(req_id, float(arrival), tuple(parts), _int(obj, "max_tokens", lineno, 1, limits.MAX_OUTPUT_TOKENS))
    )
    return float(arrival), held_tokens


def _prompt_parts(prompt: Any, lineno: int, trace: Trace, held_tokens: int) -> tuple[list[str | tuple[int, ...]], int]:
    """A request's `prompt` as parts (segment ids, inline token tuples) and the token ids held after it."""
    if not isinstance(prompt, list) or not prompt:
        raise _fail(lineno, "prompt", "must be a non-empty list of {segment} / {token_ids} parts")
    parts: list[str | tuple[int, ...]] = []
    for i, part in enumerate(prompt):
        if not isinstance(part, dict) or len(part) != 1 or not ({"segment", "token_ids"} & part.keys()):
            raise _fail(
                lineno, f"prompt[{i}]", f"must be {{'segment': id}} or {{'token_ids': [...]}}, got {part!r:.80}"
            )
        if "segment" in part:
            if part["segment"] not in trace.segments:
                raise _fail(
                    lineno,
                    f"prompt[{i}].segment",
                    f"unknown segment {part['segment']!r} (segments must be defined first)",
                )
            parts.append(part["segment"])
        else:
            parts.append(_token_ids(part["token_ids"], lineno, f"prompt[{i}].token_ids", trace.vocab_size))
            held_tokens = _hold(held_tokens, len(parts[-1]), lineno, f"prompt[{i}].token_ids")
    return parts, held_tokens


def load_trace(path: str | Path) -> Trace:
    """Read a kvtk trace file (lines length-capped and UTF-8 checked as they are read); errors name the file."""
    path = Path(path)
    with path.open("rb") as handle:
        try:
            return parse_lines(_bounded_lines(handle, "trace"), source=str(path))
        except (TraceError, StrictLoadError) as exc:
            raise TraceError(f"{path}: {exc}") from None
