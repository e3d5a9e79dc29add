"""The serving metrics from per-request records: TPOT only where output tokens are recorded, goodput against the
SLO, bytes per loaded token, and the 95% interval over seeds."""

from __future__ import annotations

import math
import statistics

import pytest

from toolkit.engines.records import make_record
from toolkit.errors import BadInput
from toolkit.experiments.metrics import Slo, mean_interval, phase_metrics
from toolkit.experiments.results import records_frame


def _records(outputs: bool):
    out = []
    for i, (ttft, e2e) in enumerate([(0.1, 0.5), (0.3, 0.7), (2.5, 3.0)]):
        rec = make_record("toolkit", "hot", f"r{i}", 100, 0, 64, ttft_s=ttft, e2e_s=e2e, load_bytes=6400)
        if outputs:
            rec.output_token_ids = list(range(5))  # 5 tokens: 4 gaps after the first
        out.append(rec)
    return out


def test_tpot_and_throughput_only_where_outputs_are_recorded():
    summary = [{"variant": "toolkit", "phase": "hot", "wall_s": 4.0}]
    live = phase_metrics(records_frame(_records(True)), summary, Slo(ttft_ms=1000, tpot_ms=120))[0]
    assert live.tpot_p50_ms == pytest.approx((0.7 - 0.3) / 4 * 1e3)
    assert live.output_tokens == 15 and live.output_tokens_per_s == pytest.approx(15 / 4.0)
    # r0: TTFT 100 ms, TPOT 100 ms: met; r1: TPOT 100 ms: met; r2: TTFT 2.5 s: missed
    assert live.slo_met_requests == 2 and live.goodput_rps == pytest.approx(2 / 4.0)
    assert live.load_bytes_per_loaded_token == pytest.approx(100.0) and live.duration_clock == "wall"
    dry = phase_metrics(records_frame(_records(False)), summary, Slo(ttft_ms=1000))[0]
    assert dry.tpot_p50_ms is None and dry.output_tokens is None and dry.slo_met_requests == 2
    assert dry.ttft_p99_ms == pytest.approx(2500.0) and dry.ttft_mean_ms == pytest.approx(2900 / 3)


def test_itl_pools_every_streamed_gap_and_is_absent_without_them():
    records = _records(True)
    records[0].itl_s = [0.1, 0.1, 0.1, 0.1]
    records[1].itl_s = [0.05, 0.15, 0.1, 0.3]
    summary = [{"variant": "toolkit", "phase": "hot", "wall_s": 4.0}]
    streamed = phase_metrics(records_frame(records), summary, Slo())[0]
    assert streamed.itl_mean_ms == pytest.approx(1000 * 1.0 / 8)  # 8 gaps pooled, r2 streamed none
    assert streamed.itl_p50_ms == pytest.approx(100.0) and streamed.itl_p99_ms == pytest.approx(300.0)
    plain = phase_metrics(records_frame(_records(True)), summary, Slo())[0]
    assert plain.itl_p50_ms is None and plain.tpot_p50_ms is not None


def test_a_tighter_slo_meets_fewer_requests():
    summary = [{"variant": "toolkit", "phase": "hot", "modelled_s": 3.0}]
    frame = records_frame(_records(True))
    loose = phase_metrics(frame, summary, Slo(ttft_ms=5000, tpot_ms=1000))[0]
    tight = phase_metrics(frame, summary, Slo(ttft_ms=200, tpot_ms=1000))[0]
    assert loose.slo_met_requests == 3 and tight.slo_met_requests == 1 and tight.duration_clock == "modelled"
    with pytest.raises(BadInput, match="slo_ttft_ms"):
        Slo(ttft_ms=math.nan)


def test_mean_interval_is_student_t():
    values = [1.0, 2.0, 4.0]
    mean, half = mean_interval(values)
    assert mean == pytest.approx(statistics.fmean(values))
    assert half == pytest.approx(4.303 * statistics.stdev(values) / math.sqrt(3))
    assert mean_interval([5.0]) == (5.0, None)


def test_session_turns_number_each_sessions_requests_in_order():
    from collections import Counter

    from toolkit.experiments.metrics import session_turns, turn_ttfts
    from toolkit.workloads.resolve import resolve_trace

    agentic = resolve_trace("agentic-small")  # 3 sessions x 3 turns, each turn extends the previous one
    turns = session_turns(agentic)
    assert Counter(turns.values()) == {1: 3, 2: 3, 3: 3}
    assert turns["ag-s1-t0"] == 1 and turns["ag-s1-t2"] == 3
    assert session_turns(resolve_trace("fewshot-small")) == {}  # a shared prefix is not a session
    records = [make_record("toolkit", "hot", rid, 10, 0, 0, ttft_s=0.001 * turn) for rid, turn in sorted(turns.items())]
    by_turn = {t.turn: t for t in turn_ttfts(records_frame(records), turns)}
    assert by_turn[3].requests == 3 and by_turn[3].ttft_p50_ms == pytest.approx(3.0)
