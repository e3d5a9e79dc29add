"""The cache-state recorder's workload (`toolkit.viz.recorder.record_synthetic_run`): prompts over shared segments.

Prompt patterns over shared segments: a conversation that grows (A, AB, ABC: hits at the previous prompt's end),
repeats (hot), shared prefixes (partial hits) and fresh prompts (pressure). With segments that are not multiples
of the scheduler block, fine-grained hits reach further than block-aligned ones. Segment X's token i is
`1000 * (ord(X) - ord("A") + 1) + i`: readable in a recording, and the same on every machine. The recorder sends
request i before engine step `i * arrival_every_steps` (its own clock, not the trace's).
"""

from __future__ import annotations

from toolkit.workloads.traces import Trace, TraceRequest

PATTERNS = (("A",), ("A", "B"), ("A", "B"), ("C", "D"), ("A", "B", "C"), ("E", "F"), ("A", "C"), ("C", "D"))


def pattern_prompt(pattern: tuple[str, ...], segment_tokens: int) -> list[int]:
    tokens: list[int] = []
    for name in pattern:
        base = 1000 * (ord(name) - ord("A") + 1)
        tokens.extend(range(base, base + segment_tokens))
    return tokens


def cache_state_prompts(*, num_requests: int = 8, segment_tokens: int = 40, max_tokens: int = 1) -> Trace:
    """Request i (`r<i>-<pattern>`) is `PATTERNS[i % len(PATTERNS)]`'s segments end to end; requests in order,
    none with an arrival time (the recorder schedules them by engine step)."""
    letters = sorted({name for pattern in PATTERNS for name in pattern})
    vocab_size = 1000 * (ord(letters[-1]) - ord("A") + 1) + segment_tokens
    params = {"num_requests": num_requests, "segment_tokens": segment_tokens, "max_tokens": max_tokens}
    trace = Trace(f"cache-state-{num_requests}", "cache-state", vocab_size, params=params)
    for name in letters:
        trace.segments[name] = pattern_prompt((name,), segment_tokens)
        trace.segment_specs[name] = {"token_ids": trace.segments[name]}
    for i in range(num_requests):
        pattern = PATTERNS[i % len(PATTERNS)]
        trace.requests.append(TraceRequest(f"r{i}-{''.join(pattern)}", 0.0, pattern, max_tokens))
    return trace
