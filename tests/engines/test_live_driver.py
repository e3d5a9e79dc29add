"""The live engine's driver without vLLM: open-loop arrivals on the engine clock, and the CPU clock's idle skips."""

from __future__ import annotations

import time

import pytest

from toolkit.engines.base import PhaseRequest
from toolkit.engines.live_driver import Arrivals, EngineClock


def _requests(arrivals):
    return [PhaseRequest(f"r{i}", [3, 4, 5], 2, arrival_s=a) for i, a in enumerate(arrivals)]


def test_arrivals_release_requests_as_the_clock_reaches_them_whatever_is_in_flight():
    feeder = Arrivals(_requests([0.0, 0.0, 0.5, 2.0]), start_s=10.0)
    assert [r.request_id for r in feeder.take(10.0)] == ["r0", "r1"]
    assert feeder.next_arrival_s == 10.5 and feeder.take(10.49) == []
    assert [r.request_id for r in feeder.take(11.0)] == ["r2"]  # two still in flight: open loop
    assert feeder.arrival_s(_requests([0.5])[0]) == 10.5
    for rid in ("r0", "r1", "r2"):
        feeder.finish(rid)
    assert not feeder.done  # r3 has not arrived
    assert [r.request_id for r in feeder.take(12.0)] == ["r3"] and feeder.next_arrival_s is None
    feeder.finish("r3")
    assert feeder.done


def test_the_cpu_clock_skips_idle_time_and_the_wall_clock_sleeps_it():
    cpu = EngineClock("cpu")
    before = cpu.now()
    cpu.wait_until(before + 5.0)  # five idle seconds skipped, not spent
    assert cpu.now() - before >= 5.0
    wall = EngineClock("wall")
    start = time.perf_counter()
    wall.wait_until(wall.now() + 0.05)
    assert time.perf_counter() - start >= 0.045
    with pytest.raises(ValueError, match="time_source: must be one of wall, cpu, got 'gpu'"):
        EngineClock("gpu")
