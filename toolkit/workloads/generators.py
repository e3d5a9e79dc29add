"""Seeded trace generators (few-shot Q&A, multi-turn agentic, long document, pressure), each a `kvtk.trace/1` Trace.

Every generator is a pure function of its parameters: the same call gives the same token ids on every machine.
Token lengths are parameters so one workload shape serves the tiny CPU model (its hybrid block is 1152 tokens, so
shared prefixes must be longer than that to hit) and dry runs with real geometries. Shared text is a *segment*
(drawn from a seed), per-request text is inline, so 10^5-request traces stay small.

They are named in `toolkit.workloads.registry`; `toolkit.workloads.resolve.resolve_trace` turns a spec such as
`fewshot:num_requests=10000,prefix_tokens=2000` into a call of one of them. The `*_sizes` functions give a trace's
size from its parameters alone, so a spec is checked before anything is drawn.
"""

from __future__ import annotations

from typing import Any, Mapping

from toolkit.workloads.traces import Trace, TraceRequest, segment_tokens

DEFAULT_VOCAB = 2048


def _add_random_segment(trace: Trace, seg_id: str, seed: int, num_tokens: int) -> str:
    trace.segments[seg_id] = segment_tokens(seed, num_tokens, trace.vocab_size)
    trace.segment_specs[seg_id] = {"random": {"seed": seed, "num_tokens": num_tokens}}
    return seg_id


def _arrival(i: int, interarrival_s: float) -> float:
    return round(i * interarrival_s, 6)


def few_shot(
    *,
    num_requests: int = 16,
    prefix_tokens: int = 2000,
    question_tokens: int = 100,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    interarrival_s: float = 0.0,
    name: str = "",
) -> Trace:
    """The GSM8K 20-shot shape: one long shared few-shot prefix, then a distinct question per request."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"fewshot-{num_requests}", "fewshot", vocab_size, params=params)
    _add_random_segment(trace, "fewshot", seed * 1_000_003 + 1, prefix_tokens)
    questions = segment_tokens(seed * 1_000_003 + 2, num_requests * question_tokens, vocab_size)
    for i in range(num_requests):
        q = tuple(questions[i * question_tokens : (i + 1) * question_tokens])
        trace.requests.append(TraceRequest(f"fs-{i}", _arrival(i, interarrival_s), ("fewshot", q), max_tokens))
    return trace


def agentic(
    *,
    num_sessions: int = 4,
    num_turns: int = 3,
    system_tokens: int = 1200,
    user_tokens: int = 200,
    assistant_tokens: int = 150,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    interarrival_s: float = 0.0,
    name: str = "",
) -> Trace:
    """Multi-turn agentic sessions: turn t's prompt is turn t-1's prompt + its answer + a new user message.

    All sessions share the system prompt (tool definitions); requests arrive turn by turn across sessions.
    """
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"agentic-{num_sessions}x{num_turns}", "agentic", vocab_size, params=params)
    _add_random_segment(trace, "system", seed * 1_000_003 + 1, system_tokens)
    history: list[list[str]] = [["system"] for _ in range(num_sessions)]
    i = 0
    for turn in range(num_turns):
        for s in range(num_sessions):
            base = seed * 1_000_003 + 10 + (s * num_turns + turn) * 2
            if turn > 0:
                history[s].append(_add_random_segment(trace, f"s{s}.a{turn - 1}", base - 1, assistant_tokens))
            history[s].append(_add_random_segment(trace, f"s{s}.u{turn}", base, user_tokens))
            trace.requests.append(
                TraceRequest(f"ag-s{s}-t{turn}", _arrival(i, interarrival_s), tuple(history[s]), max_tokens)
            )
            i += 1
    return trace


def long_document(
    *,
    num_docs: int = 2,
    doc_tokens: int = 3000,
    num_questions: int = 8,
    question_tokens: int = 64,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    interarrival_s: float = 0.0,
    name: str = "",
) -> Trace:
    """A few long shared documents and many short questions, each about one document (round robin)."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"longdoc-{num_docs}x{num_questions}", "longdoc", vocab_size, params=params)
    for d in range(num_docs):
        _add_random_segment(trace, f"doc{d}", seed * 1_000_003 + 1 + d, doc_tokens)
    questions = segment_tokens(seed * 1_000_003 + 999, num_questions * question_tokens, vocab_size)
    for i in range(num_questions):
        q = tuple(questions[i * question_tokens : (i + 1) * question_tokens])
        trace.requests.append(
            TraceRequest(f"ld-{i}", _arrival(i, interarrival_s), (f"doc{i % num_docs}", q), max_tokens)
        )
    return trace


def pressure(
    *,
    num_requests: int,
    prompt_tokens: int,
    max_tokens: int = 1,
    seed: int = 7,
    vocab_size: int = DEFAULT_VOCAB,
    name: str = "pressure",
) -> Trace:
    """Unrelated traffic (no shared prefix with anything) that evicts from the device cache and the CPU tier."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name, "pressure", vocab_size, params=params)
    # A distinct stream per request: its first token differs from the others' with overwhelming probability.
    for i in range(num_requests):
        seg = _add_random_segment(trace, f"p{i}", 7_000_000_000 + seed * 1_000_003 + i, prompt_tokens)
        trace.requests.append(TraceRequest(f"pr-{i}", 0.0, (seg,), max_tokens))
    return trace


def few_shot_sizes(p: Mapping[str, Any]) -> tuple[int, int, int]:
    """(requests, longest prompt, token ids held) of a `few_shot` trace, from its parameters alone."""
    return (
        p["num_requests"],
        p["prefix_tokens"] + p["question_tokens"],
        p["prefix_tokens"] + p["num_requests"] * p["question_tokens"],
    )


def agentic_sizes(p: Mapping[str, Any]) -> tuple[int, int, int]:
    """(requests, longest prompt, token ids held) of an `agentic` trace, from its parameters alone."""
    turns, sessions = p["num_turns"], p["num_sessions"]
    longest = p["system_tokens"] + turns * p["user_tokens"] + (turns - 1) * p["assistant_tokens"]
    return (
        sessions * turns,
        longest,
        p["system_tokens"] + sessions * (turns * p["user_tokens"] + (turns - 1) * p["assistant_tokens"]),
    )


def long_document_sizes(p: Mapping[str, Any]) -> tuple[int, int, int]:
    """(requests, longest prompt, token ids held) of a `long_document` trace, from its parameters alone."""
    return (
        p["num_questions"],
        p["doc_tokens"] + p["question_tokens"],
        p["num_docs"] * p["doc_tokens"] + p["num_questions"] * p["question_tokens"],
    )
