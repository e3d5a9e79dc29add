"""Closed-loop clients (`--concurrency N`): who is sent when, in pure Python and in the dry engine."""

from __future__ import annotations

import pytest

from toolkit.engines.base import PhaseRequest
from toolkit.workloads.clients import ClosedLoop, previous_turns
from toolkit.workloads.resolve import resolve_trace


def _reqs(*ids: str) -> list[PhaseRequest]:
    return [PhaseRequest(i, [3, 4, 5], 1) for i in ids]


def test_previous_turns_follow_sessions_not_shared_segments():
    agentic = previous_turns(resolve_trace("agentic-small"))
    assert agentic == {f"ag-s{s}-t{t}": f"ag-s{s}-t{t - 1}" for s in range(3) for t in (1, 2)}
    # Few-shot questions and long-document questions share a segment, never a whole earlier prompt.
    assert previous_turns(resolve_trace("fewshot-small")) == {}
    assert previous_turns(resolve_trace("longdoc-small")) == {}


def test_at_most_n_in_flight_in_trace_order():
    loop = ClosedLoop(_reqs("a", "b", "c", "d", "e"), 2)
    assert [r.request_id for r in loop.take()] == ["a", "b"]
    assert loop.take() == []  # both clients busy
    loop.finish("b")
    assert [r.request_id for r in loop.take()] == ["c"]
    loop.finish("a")
    loop.finish("c")
    assert [r.request_id for r in loop.take()] == ["d", "e"]
    loop.finish("d")
    loop.finish("e")
    assert loop.done and loop.max_in_flight == 2


def test_a_turn_waits_for_its_previous_turn_and_a_free_client_skips_ahead():
    # s0 has turns 0 and 1; the free client takes s1-t0 rather than wait for s0-t0.
    loop = ClosedLoop(_reqs("s0-t0", "s0-t1", "s1-t0", "s1-t1"), 2, {"s0-t1": "s0-t0", "s1-t1": "s1-t0"})
    assert [r.request_id for r in loop.take()] == ["s0-t0", "s1-t0"]
    loop.finish("s1-t0")
    assert [r.request_id for r in loop.take()] == ["s1-t1"]  # s0-t1 still waits for s0-t0
    loop.finish("s0-t0")
    assert [r.request_id for r in loop.take()] == ["s0-t1"]
    loop.finish("s1-t1")
    loop.finish("s0-t1")
    assert loop.done


def test_a_released_turn_goes_before_later_requests():
    loop = ClosedLoop(_reqs("a0", "a1", "b", "c"), 1, {"a1": "a0"})
    assert [r.request_id for r in loop.take()] == ["a0"]
    loop.finish("a0")
    assert [r.request_id for r in loop.take()] == ["a1"]  # trace order: a1 before b and c


def test_a_previous_turn_outside_the_phase_holds_nothing_back():
    loop = ClosedLoop(_reqs("t1", "t2"), 2, {"t1": "t0", "t2": "t1"})
    assert [r.request_id for r in loop.take()] == ["t1"]


def test_bad_concurrency_is_refused():
    with pytest.raises(ValueError, match="concurrency"):
        ClosedLoop(_reqs("a"), 0)
    from toolkit.experiments.runner import ExperimentConfig

    with pytest.raises(ValueError, match="concurrency"):
        ExperimentConfig(concurrency=0)
    with pytest.raises(ValueError, match="window/concurrency"):
        ExperimentConfig(concurrency=4, window=4)


def test_concurrency_refuses_a_trace_with_arrival_times(tmp_path):
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    with pytest.raises(ValueError, match="arrival times"):
        run_experiment(
            ExperimentConfig(
                trace="fewshot:num_requests=3,interarrival_s=0.5", concurrency=2, out=str(tmp_path / "run")
            )
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.engine
def test_dry_engine_sends_each_turn_after_its_previous_turn_finished():
    """agentic-small at 4 clients in the dry engine: 3 sessions in flight at once, and on the virtual clock no turn
    arrives before its previous turn's end-to-end time has passed; one client is the default closed loop."""
    from toolkit.engines.base import VariantSpec
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.runner import phase_prompts

    trace = resolve_trace("agentic-small")
    requests, after = phase_prompts(trace), previous_turns(trace)
    spec = VariantSpec(name="toolkit")
    results = {}
    for concurrency in (None, 1, 4):
        dry = DryEngine(spec, model="tiny-qwen3-next", cpu_bytes=64 << 20, num_gpu_blocks=64, prefix_match_unit=128)
        arrivals: dict[str, float] = {}
        clock = dry._virtual_clock()
        arrive = clock.arrive
        clock.arrive = lambda key, t: (arrivals.__setitem__(key.split(":", 1)[1], t), arrive(key, t))[1]
        records = dry.run_phase("cold", requests, concurrency=concurrency, after=after)
        results[concurrency] = [(r.local_hit_tokens, r.external_hit_tokens) for r in records]
        if concurrency == 4:
            assert dry.clients.max_in_flight == 3
            ends = {r.request_id: arrivals[r.request_id] + r.e2e_s for r in records}
            for turn, prev in after.items():
                assert arrivals[turn] >= ends[prev] - 1e-9, (turn, prev)
    assert results[None] == results[1]


def test_the_documented_default_is_one_client_and_arrival_times_mean_open_loop():
    from toolkit.workloads.clients import DEFAULT_CLIENTS, clients_for

    plain = _reqs("a", "b")
    timed = [PhaseRequest("a", [3], 1, 0.0), PhaseRequest("b", [3], 1, 0.5)]
    assert DEFAULT_CLIENTS == 1
    assert (clients_for(plain, None), clients_for(plain, 3), clients_for(timed, None)) == (1, 3, None)


def test_send_times_follow_each_mode():
    from toolkit.workloads.clients import send_times

    reqs = _reqs("s0-t0", "s1-t0", "s0-t1", "s1-t1")
    after = {"s0-t1": "s0-t0", "s1-t1": "s1-t0"}
    service = {"s0-t0": 3.0, "s1-t0": 1.0, "s0-t1": 2.0, "s1-t1": 2.0}
    # One client (the default): each request when the one before it finished.
    assert send_times(reqs, None, service, after) == {"s0-t0": 0.0, "s1-t0": 3.0, "s0-t1": 4.0, "s1-t1": 6.0}
    # Two clients: s1-t1 goes when its previous turn s1-t0 finished (at 1), before s0-t1 (held until 3).
    assert send_times(reqs, 2, service, after) == {"s0-t0": 0.0, "s1-t0": 0.0, "s1-t1": 1.0, "s0-t1": 3.0}
    timed = [PhaseRequest(r.request_id, [3], 1, 0.25 * i) for i, r in enumerate(reqs)]
    assert send_times(timed, None, service) == {r.request_id: r.arrival_s for r in timed}  # open loop


@pytest.mark.engine
@pytest.mark.parametrize("mode", ["sequential", "concurrency", "open"])
def test_the_dry_engine_sends_when_the_reference_says_and_the_live_engine_picks_the_same_mode(mode):
    """The dry engine's send times (its clock's arrivals) in each mode are `clients.send_times` of its own
    completion times; the live engine feeds a phase by the same `clients_for` and `ClosedLoop` (no live engine
    here: which mode it picks is read from its code, its timing is tested in test_calibrate_live.py)."""
    import dataclasses
    import inspect

    from toolkit.engines.base import VariantSpec
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine
    from toolkit.experiments.runner import phase_prompts
    from toolkit.workloads.clients import send_times

    trace = resolve_trace("agentic-small")
    requests, after = phase_prompts(trace), previous_turns(trace)
    concurrency = 2 if mode == "concurrency" else None
    if mode == "open":  # arrivals 1 us apart: faster than the default step model's tiny-model prefills (3-7 us)
        requests = [dataclasses.replace(r, arrival_s=1e-6 * i) for i, r in enumerate(requests)]
    dry = DryEngine(
        VariantSpec(name="toolkit"),
        model="tiny-qwen3-next",
        cpu_bytes=64 << 20,
        num_gpu_blocks=64,
        prefix_match_unit=128,
    )
    dry.run_phase("warm", requests[:1])  # the phase under test starts at a clock past 0
    arrivals: dict[str, float] = {}
    clock = dry._virtual_clock()
    start_s, arrive = clock.now_s, clock.arrive
    clock.arrive = lambda key, t: (arrivals.__setitem__(key.split(":", 1)[1], t - start_s), arrive(key, t))[1]
    records = dry.run_phase("cold", requests, concurrency=concurrency, after=after)
    service = {r.request_id: r.e2e_s for r in records}
    assert arrivals == pytest.approx(send_times(requests, concurrency, service, after), abs=1e-9)
    # Each mode as named: how many others are in flight when a request is sent (one client: none; two: one at most).
    spans = [(arrivals[r.request_id], arrivals[r.request_id] + r.e2e_s) for r in records]
    busy = max(sum(a <= t < e for a, e in spans) for t, _ in spans) - 1
    assert busy == {"sequential": 0, "concurrency": 1}.get(mode, busy) and (busy > 0) == (mode != "sequential")
    for engine in (DryEngine, LiveEngine):
        assert "clients_for(requests, concurrency)" in inspect.getsource(engine.run_phase)
