"""Session traffic for the hint measurements: `conversation` (chat sessions that come back after uneven gaps) and
`with_scan` (unhinted prompts mixed in while sessions wait, one-off or on shared documents: the unhinted traffic
hints must not starve).

`conversation` differs from `agentic` where retention matters: sessions have their own turn counts (2 to
`max_turns`, seeded), no prompt shared across sessions, and a session's next turn comes after a seeded, uneven
number of other requests, so a fixed TTL (or recency) cannot tell a session that returns soon from one that has
ended. Like every generator it is a pure function of its parameters.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Mapping

from toolkit.workloads.generators import DEFAULT_VOCAB
from toolkit.workloads.traces import Trace, TraceRequest, segment_tokens


def _add_random_segment(trace: Trace, seg_id: str, seed: int, num_tokens: int) -> str:
    """A seeded random segment, recorded with its spec as the generators record theirs."""
    trace.segments[seg_id] = segment_tokens(seed, num_tokens, trace.vocab_size)
    trace.segment_specs[seg_id] = {"random": {"seed": seed, "num_tokens": num_tokens}}
    return seg_id


def conversation(
    *,
    num_sessions: int = 8,
    max_turns: int = 6,
    first_tokens: int = 1500,
    user_tokens: int = 120,
    assistant_tokens: int = 200,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    name: str = "",
) -> Trace:
    """Chat sessions: a long first message (a pasted document), then turns that each extend the last; the sessions'
    turns interleave in a seeded order (each session's in turn order)."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"conversation-{num_sessions}x{max_turns}", "conversation", vocab_size, params=params)
    rng = random.Random(seed)
    turns = [rng.randint(2, max(2, max_turns)) for _ in range(num_sessions)]
    order = [s for s in range(num_sessions) for _ in range(turns[s])]
    rng.shuffle(order)
    history: list[list[str]] = [[] for _ in range(num_sessions)]
    done = [0] * num_sessions
    for s in order:
        turn = done[s]
        done[s] += 1
        base = seed * 1_000_003 + 10 + (s * (max_turns + 1) + turn) * 2
        if turn == 0:
            history[s].append(_add_random_segment(trace, f"c{s}.doc", base - 1, first_tokens))
        else:
            history[s].append(_add_random_segment(trace, f"c{s}.a{turn - 1}", base - 1, assistant_tokens))
        history[s].append(_add_random_segment(trace, f"c{s}.u{turn}", base, user_tokens))
        trace.requests.append(TraceRequest(f"cv-s{s}-t{turn}", 0.0, tuple(history[s]), max_tokens))
    return trace


def conversation_sizes(p: Mapping[str, Any]) -> tuple[int, int, int]:
    """(requests at most, longest prompt, token ids held at most) of a `conversation` trace, from its parameters."""
    turns, sessions = max(2, p["max_turns"]), p["num_sessions"]
    longest = p["first_tokens"] + turns * p["user_tokens"] + (turns - 1) * p["assistant_tokens"]
    return sessions * turns, longest, sessions * longest


def with_scan(trace: Trace, *, every: int, prompt_tokens: int, seed: int = 11, documents: int = 0) -> Trace:
    """`trace` with an unhinted prompt of `prompt_tokens` after every `every` requests: a one-off (shares nothing)
    or, with `documents`, one of that many shared documents (round robin) and a one-off question of a tenth of it,
    so the unhinted traffic has reuse a hint-aware tier could starve."""
    out = replace(trace, name=f"{trace.name}+scan{every}", requests=[], segments=dict(trace.segments))
    out.segment_specs = dict(trace.segment_specs)
    base = 9_000_000_000 + seed * 1_000_003
    for d in range(documents):
        _add_random_segment(out, f"scan-doc{d}", base - 1 - d, prompt_tokens)
    sent = 0
    for i, req in enumerate(trace.requests):
        out.requests.append(req)
        if every and (i + 1) % every == 0:
            if documents:
                question = _add_random_segment(out, f"scan-q{i}", base + i, max(1, prompt_tokens // 10))
                parts: tuple[str, ...] = (f"scan-doc{sent % documents}", question)
            else:
                parts = (_add_random_segment(out, f"scan{i}", base + i, prompt_tokens),)
            out.requests.append(TraceRequest(f"scan-{i}", req.arrival_s, parts, req.max_tokens))
            sent += 1
    return out
