"""Workload traces: a JSON Lines format of token-id requests built from shared segments, its strict parser and writer.

Schema `kvtk.trace/1` (parsed with `json` only; one object per line, blank lines are not allowed):

    line 1, the header:
      {"type": "header", "schema": "kvtk.trace/1", "name": str, "workload": str,
       "vocab_size": int,                  # token ids lie in [3, vocab_size) (0-2 are kept for special tokens)
       "params": {...}}                    # optional: the generator's parameters, for the record

    a segment (a run of tokens that several prompts share; defined before any request uses it):
      {"type": "segment", "segment_id": str,
       "token_ids": [int, ...]}            # explicit ids, or
      {"type": "segment", "segment_id": str,
       "random": {"seed": int, "num_tokens": int}}   # seeded ids drawn by `segment_tokens` (numpy PCG64)

    a request:
      {"type": "request", "request_id": str,         # unique in the trace
       "arrival_s": float,                            # >= 0, non-decreasing (seconds from the trace start)
       "prompt": [{"segment": str} | {"token_ids": [int, ...]}, ...],   # concatenated in order
       "max_tokens": int}                             # output tokens to generate (>= 1)

Caps (`limits.py`, checked while parsing, before anything is materialised): a name is a plain name (no path
separators or `..`), a prompt <= 2^20 tokens, max_tokens <= 2^17, arrivals finite and <= 1e9 s, a line <= 16 MiB,
<= 2^24 token ids in all, <= 10^6 requests; duplicate keys and NaN/Infinity are refused.

Every other field, a wrong type, an unknown segment or a duplicated id is refused with a `TraceError` that names
the line number and the field. Prompts are materialised on demand (`Trace.prompt_token_ids`), so a trace of 10^5
requests over a few shared segments stays small in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from toolkit import limits
from toolkit.strict_load import StrictLoadError, json_loads
from toolkit.strict_load import iter_lines as _bounded_lines

SCHEMA = "kvtk.trace/1"
FIRST_TOKEN_ID = 3


class TraceError(ValueError):
    """A trace that does not follow the schema; the message names the line and the field."""


@dataclass(frozen=True)
class TraceRequest:
    """One request: its prompt is the concatenation of `parts` (segment ids as str, inline token tuples)."""

    request_id: str
    arrival_s: float
    parts: tuple[str | tuple[int, ...], ...]
    max_tokens: int


@dataclass
class Trace:
    """A parsed trace: header fields, segments (materialised token lists) and requests in arrival order."""

    name: str
    workload: str
    vocab_size: int
    segments: dict[str, list[int]] = field(default_factory=dict)
    segment_specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[TraceRequest] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def prompt_token_ids(self, request: TraceRequest) -> list[int]:
        tokens: list[int] = []
        for part in request.parts:
            tokens.extend(self.segments[part] if isinstance(part, str) else part)
        return tokens

    def prompt_len(self, request: TraceRequest) -> int:
        return sum(len(self.segments[p]) if isinstance(p, str) else len(p) for p in request.parts)

    def total_prompt_tokens(self) -> int:
        return sum(self.prompt_len(r) for r in self.requests)

    def head(self, num_requests: int) -> "Trace":
        """The first `num_requests` requests with the segments they use."""
        requests = self.requests[:num_requests]
        used = {p for r in requests for p in r.parts if isinstance(p, str)}
        return Trace(
            self.name,
            self.workload,
            self.vocab_size,
            {k: v for k, v in self.segments.items() if k in used},
            {k: v for k, v in self.segment_specs.items() if k in used},
            requests,
            dict(self.params),
        )


def segment_tokens(seed: int, num_tokens: int, vocab_size: int) -> list[int]:
    """Seeded token ids in [3, vocab_size): the same on every machine (numpy's PCG64 stream)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(FIRST_TOKEN_ID, vocab_size, size=num_tokens, dtype=np.int64).tolist()


# ----- parsing --------------------------------------------------------------------------------------------------


def _fail(lineno: int, fieldname: str, message: str) -> TraceError:
    return TraceError(f"trace line {lineno}: field {fieldname!r}: {message}")


def json_object_line(line: str, lineno: int, *, label: str = "trace") -> dict:
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


def _check_keys(obj: dict, lineno: int, required: set[str], optional: set[str] = frozenset()) -> None:
    for key in sorted(required - obj.keys()):
        raise _fail(lineno, key, "missing")
    for key in sorted(obj.keys() - required - optional):
        raise _fail(lineno, key, f"unknown field (valid: {', '.join(sorted(required | optional))})")


def _int(obj: dict, key: str, lineno: int, minimum: int, maximum: int = 2**63 - 1) -> int:
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise _fail(lineno, key, f"must be an integer in [{minimum}, {maximum}], got {value!r:.60}")
    return value


def _str(obj: dict, key: str, lineno: int) -> str:
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
            trace = Trace(
                name,
                _str(obj, "workload", lineno),
                _int(obj, "vocab_size", lineno, FIRST_TOKEN_ID + 1, 2**31),
                params=params,
            )
        elif kind == "segment":
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
            else:
                spec = obj["random"]
                if not isinstance(spec, dict):
                    raise _fail(lineno, "random", "must be an object {seed, num_tokens}")
                _check_keys(spec, lineno, {"seed", "num_tokens"})
                seed = _int(spec, "seed", lineno, 0, 2**64 - 1)
                num = _int(spec, "num_tokens", lineno, 1, limits.MAX_PROMPT_TOKENS)
                held_tokens = _hold(held_tokens, num, lineno, "random.num_tokens")
                trace.segments[seg_id] = segment_tokens(seed, num, trace.vocab_size)
                trace.segment_specs[seg_id] = {"random": {"seed": seed, "num_tokens": num}}
        elif kind == "request":
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
            prompt = obj["prompt"]
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
            prompt_tokens = sum(len(trace.segments[p]) if isinstance(p, str) else len(p) for p in parts)
            if prompt_tokens > limits.MAX_PROMPT_TOKENS:
                raise _fail(lineno, "prompt", f"{prompt_tokens} tokens, more than the limit {limits.MAX_PROMPT_TOKENS}")
            seen_ids.add(req_id)
            last_arrival = float(arrival)
            trace.requests.append(
                TraceRequest(
                    req_id, float(arrival), tuple(parts), _int(obj, "max_tokens", lineno, 1, limits.MAX_OUTPUT_TOKENS)
                )
            )
        else:
            raise _fail(lineno, "type", f"must be 'segment' or 'request' after the header, got {kind!r}")
    if trace is None:
        raise TraceError(f"trace {source}: empty (no header line)")
    return trace


def _hold(held: int, more: int, lineno: int, fieldname: str) -> int:
    if held + more > limits.MAX_TRACE_TOKENS:
        raise _fail(lineno, fieldname, f"the trace would hold more than {limits.MAX_TRACE_TOKENS} token ids")
    return held + more


def load_trace(path: str | Path) -> Trace:
    """Read a kvtk trace file (lines length-capped and UTF-8 checked as they are read); errors name the file."""
    path = Path(path)
    with path.open("rb") as handle:
        try:
            return parse_lines(_bounded_lines(handle, "trace"), source=str(path))
        except (TraceError, StrictLoadError) as exc:
            raise TraceError(f"{path}: {exc}") from None


# ----- writing --------------------------------------------------------------------------------------------------


def iter_lines(trace: Trace) -> Iterator[str]:
    header = {
        "type": "header",
        "schema": SCHEMA,
        "name": trace.name,
        "workload": trace.workload,
        "vocab_size": trace.vocab_size,
    }
    if trace.params:
        header["params"] = trace.params
    yield json.dumps(header)
    for seg_id, tokens in trace.segments.items():
        spec = trace.segment_specs.get(seg_id) or {"token_ids": tokens}
        yield json.dumps({"type": "segment", "segment_id": seg_id, **spec}, separators=(",", ":"))
    for r in trace.requests:
        prompt = [{"segment": p} if isinstance(p, str) else {"token_ids": list(p)} for p in r.parts]
        yield json.dumps(
            {
                "type": "request",
                "request_id": r.request_id,
                "arrival_s": r.arrival_s,
                "prompt": prompt,
                "max_tokens": r.max_tokens,
            },
            separators=(",", ":"),
        )


def write_trace(trace: Trace, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(iter_lines(trace)) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


class TraceRecorder:
    """Records the requests a run actually submitted, in the trace format (prompts inline, or as known segments).

    `record(request_id, prompt_token_ids, max_tokens, arrival_s)` per submitted request; `save(path)` writes them.
    A prompt that starts with a registered segment is written as that segment plus the inline rest.
    """

    def __init__(self, name: str, workload: str, vocab_size: int, params: dict | None = None) -> None:
        self._trace = Trace(name, workload, vocab_size, params=dict(params or {}))

    def add_segment(self, segment_id: str, token_ids: list[int]) -> None:
        self._trace.segments[segment_id] = list(token_ids)
        self._trace.segment_specs[segment_id] = {"token_ids": list(token_ids)}

    def record(self, request_id: str, prompt_token_ids: list[int], max_tokens: int, arrival_s: float = 0.0) -> None:
        parts: list[str | tuple[int, ...]] = []
        rest = list(prompt_token_ids)
        for seg_id, seg in self._trace.segments.items():
            if len(seg) < len(rest) and rest[: len(seg)] == seg:
                parts.append(seg_id)
                rest = rest[len(seg) :]
                break
        parts.append(tuple(rest))
        arrival = max(arrival_s, self._trace.requests[-1].arrival_s if self._trace.requests else 0.0)
        self._trace.requests.append(TraceRequest(request_id, arrival, tuple(parts), max_tokens))

    @property
    def trace(self) -> Trace:
        return self._trace

    def save(self, path: str | Path) -> Path:
        return write_trace(self._trace, path)
