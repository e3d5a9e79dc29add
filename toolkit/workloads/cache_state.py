"""The cache-state recorder's workload (`toolkit.viz.recorder.record_synthetic_run`): prompts by engine step.

Prompt patterns over shared segments: a conversation that grows (A, AB, ABC: hits at the previous prompt's end),
repeats (hot), shared prefixes (partial hits) and fresh prompts (pressure). With segments that are not multiples
of the scheduler block, fine-grained hits reach further than block-aligned ones. Segment X's token i is
`1000 * (ord(X) - ord("A") + 1) + i`: readable in a recording, and the same on every machine.
"""

from __future__ import annotations

PATTERNS = (("A",), ("A", "B"), ("A", "B"), ("C", "D"), ("A", "B", "C"), ("E", "F"), ("A", "C"), ("C", "D"))


def pattern_prompt(pattern: tuple[str, ...], segment_tokens: int) -> list[int]:
    tokens: list[int] = []
    for name in pattern:
        base = 1000 * (ord(name) - ord("A") + 1)
        tokens.extend(range(base, base + segment_tokens))
    return tokens


def arrivals(
    *, num_requests: int = 8, segment_tokens: int = 40, arrival_every_steps: int = 3
) -> dict[int, list[tuple[str, list[int]]]]:
    """Engine step -> the (request id, prompt token ids) added before it; request i arrives at step
    `i * arrival_every_steps` with pattern `PATTERNS[i % len(PATTERNS)]` (its id names the pattern)."""
    out: dict[int, list[tuple[str, list[int]]]] = {}
    for i in range(num_requests):
        pattern = PATTERNS[i % len(PATTERNS)]
        out.setdefault(i * arrival_every_steps, []).append(
            (f"r{i}-{''.join(pattern)}", pattern_prompt(pattern, segment_tokens))
        )
    return out
