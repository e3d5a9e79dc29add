"""Workload traces: a JSON Lines format of token-id requests built from shared segments, and its writer.

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
the line number and the field (the parser: `trace_parser.py`). Prompts are materialised on demand (`Trace.prompt_token_ids`), so a trace of 10^5
requests over a few shared segments stays small in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from toolkit.errors import BadInput

SCHEMA = "kvtk.trace/1"
FIRST_TOKEN_ID = 3


class TraceError(BadInput):
    """A trace that does not follow the schema; the message names the line and the field."""


@dataclass(frozen=True)
class TraceRequest:
    """One request: its prompt is the concatenation of `parts` (segment ids as str, inline token tuples)."""

    request_id: str
    arrival_s: float
    parts: tuple[str | tuple[int, ...], ...]
    max_tokens: int


@dataclass(frozen=True)
class PromptBlocks:
    """A prompt made of whole blocks: the tokens of `block_ids` end to end (the last one cut), block j's tokens a
    function of (`tokens_key`, its id) alone, so prompts whose ids agree up to block k agree in tokens up to there.
    Readers key or hash such a prompt per block without making its tokens (the bounds, the dry engine's hasher)."""

    block_ids: Sequence[int]
    block_tokens: int
    # What the id-to-tokens function depends on besides the id (e.g. seed, vocabulary, size).
    tokens_key: tuple[int, ...]


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

    def prompt_blocks(self, request: TraceRequest) -> PromptBlocks | None:
        """The request's prompt as `PromptBlocks`, where its tokens are made that way (None here: segments)."""
        return None

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
    tokens: list[int] = rng.integers(FIRST_TOKEN_ID, vocab_size, size=num_tokens, dtype=np.int64).tolist()
    return tokens


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

    def __init__(self, name: str, workload: str, vocab_size: int, params: dict[str, Any] | None = None) -> None:
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
