"""The identity check of a phase's greedy outputs (tokens and the top-1 logprob of each, as
`toolkit.vllm.live.top1_output` reads them) against the cold phase's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from toolkit.engines.records import RequestRecord


@dataclass(frozen=True)
class OutputComparison:
    """One request's greedy output against a reference's: the one comparison the phases and the soak make."""

    tokens_identical: bool
    logprobs_exact: bool
    differing_tokens: int  # positions whose token differs, plus the length difference
    max_abs_logprob_delta: float  # over the positions both have; a NaN (wrong KV) counts as infinite


def compare_output(
    token_ids: Sequence[int], logprobs: Sequence[float], ref_token_ids: Sequence[int], ref_logprobs: Sequence[float]
) -> OutputComparison:
    max_delta = 0.0
    for a, b in zip(logprobs, ref_logprobs):
        delta = abs(a - b)
        max_delta = max(max_delta, float("inf") if delta != delta else delta)  # NaN (wrong KV) is no match
    differing = sum(a != b for a, b in zip(token_ids, ref_token_ids)) + abs(len(token_ids) - len(ref_token_ids))
    return OutputComparison(
        tokens_identical=list(token_ids) == list(ref_token_ids),
        logprobs_exact=list(logprobs) == list(ref_logprobs),
        differing_tokens=differing,
        max_abs_logprob_delta=max_delta,
    )


def compare_outputs(
    records: list[RequestRecord], reference: dict[str, RequestRecord], *, tolerance: float
) -> dict[str, Any]:
    """Two levels: bit-exact tokens and top-1 logprobs, else within `tolerance` (tokens must still match)."""
    tokens_same = exact = True
    max_delta = 0.0
    differing = total = 0
    for rec in records:
        ref = reference[rec.request_id]
        one = compare_output(rec.output_token_ids, rec.output_logprobs, ref.output_token_ids, ref.output_logprobs)
        total += len(ref.output_token_ids)
        differing += one.differing_tokens
        tokens_same = tokens_same and one.tokens_identical
        exact = exact and one.logprobs_exact
        max_delta = max(max_delta, one.max_abs_logprob_delta)
    return {
        "outputs_identical": tokens_same and exact,
        "tokens_identical": tokens_same,
        "differing_output_tokens": differing,
        "output_tokens": total,
        "max_abs_logprob_delta": max_delta,
        "within_tolerance": tokens_same and max_delta <= tolerance,
    }
