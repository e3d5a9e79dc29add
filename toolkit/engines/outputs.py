"""The identity check of a phase's greedy outputs (tokens and the top-1 logprob of each, as
`toolkit.vllm.live.top1_output` reads them) against the cold phase's."""

from __future__ import annotations

from typing import Any

from toolkit.engines.records import RequestRecord


def compare_outputs(
    records: list[RequestRecord], reference: dict[str, RequestRecord], *, tolerance: float
) -> dict[str, Any]:
    """Two levels: bit-exact tokens and top-1 logprobs, else within `tolerance` (tokens must still match)."""
    tokens_same = True
    exact = True
    max_delta = 0.0
    differing = total = 0
    for rec in records:
        ref = reference[rec.request_id]
        total += len(ref.output_token_ids)
        differing += sum(a != b for a, b in zip(rec.output_token_ids, ref.output_token_ids))
        differing += abs(len(rec.output_token_ids) - len(ref.output_token_ids))
        if rec.output_token_ids != ref.output_token_ids:
            tokens_same = False
        for a, b in zip(rec.output_logprobs, ref.output_logprobs):
            delta = abs(a - b)
            max_delta = max(max_delta, float("inf") if delta != delta else delta)  # NaN (wrong KV) is no match
        if rec.output_logprobs != ref.output_logprobs:
            exact = False
    return {
        "outputs_identical": tokens_same and exact,
        "tokens_identical": tokens_same,
        "differing_output_tokens": differing,
        "output_tokens": total,
        "max_abs_logprob_delta": max_delta,
        "within_tolerance": tokens_same and max_delta <= tolerance,
    }
