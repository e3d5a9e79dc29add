"""The one output comparison the phases and the soak share (`toolkit.engines.outputs.compare_output`)."""

from __future__ import annotations

import math

from toolkit.engines.outputs import compare_output


def test_equal_outputs_are_identical_and_exact():
    one = compare_output([1, 2, 3], [-0.1, -0.2, -0.3], [1, 2, 3], [-0.1, -0.2, -0.3])
    assert one.tokens_identical and one.logprobs_exact and one.differing_tokens == 0 and one.max_abs_logprob_delta == 0


def test_a_nan_logprob_is_no_match_and_a_length_difference_counts_as_differing_tokens():
    one = compare_output([1, 2, 9], [-0.1, math.nan, -0.3], [1, 2, 3, 4], [-0.1, -0.2, -0.35, -0.4])
    assert not one.tokens_identical and not one.logprobs_exact
    assert one.differing_tokens == 2  # position 2, and the reference's extra token
    assert one.max_abs_logprob_delta == math.inf


def test_a_small_logprob_move_keeps_the_tokens_identical_but_not_exact():
    one = compare_output([5, 6], [-1.0, -2.0], [5, 6], [-1.0, -2.004])
    assert one.tokens_identical and not one.logprobs_exact and abs(one.max_abs_logprob_delta - 0.004) < 1e-12
