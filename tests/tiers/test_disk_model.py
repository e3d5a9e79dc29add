"""The dry engine's disk model: it reproduces the figures it was fitted from, scales with queue depth up to the
device's saturated rate, and stages a load through host memory."""

from __future__ import annotations

import pytest

from toolkit.tiers.disk.model import GEN5_X4, MIB, THIS_HOST, Direction, load_s, slots_for, staged_load_s, store_s

GIB = 1 << 30


def test_reproduces_the_measured_qd1_rates():
    assert MIB / load_s(THIS_HOST, MIB, MIB, 1) == pytest.approx(1.34e9)
    assert MIB / store_s(THIS_HOST, MIB, MIB, 1) == pytest.approx(2.45e9)
    assert 64 * MIB / load_s(GEN5_X4, 64 * MIB, MIB, 1) == pytest.approx(4.7 * GIB)


@pytest.mark.parametrize("model", [THIS_HOST, GEN5_X4])
def test_queue_depth_helps_until_the_device_saturates(model):
    times = [load_s(model, GIB, MIB, qd) for qd in (1, 2, 4, 16, 64, 256)]
    assert times == sorted(times, reverse=True)
    assert GIB / times[-1] == pytest.approx(model.read.max_bytes_per_s)
    assert times[0] > times[-1]


def test_small_blocks_pay_the_latency():
    big = load_s(THIS_HOST, 64 * MIB, 4 * MIB, 1)
    small = load_s(THIS_HOST, 64 * MIB, 64 * 1024, 1)
    assert small > 2 * big


def test_a_queue_deeper_than_the_ios_does_not_help():
    assert load_s(GEN5_X4, 2 * MIB, MIB, 2) == load_s(GEN5_X4, 2 * MIB, MIB, 64)


def test_staged_load_is_bounded_by_its_stages():
    disk, copy = 0.8, 0.2
    staged = staged_load_s(disk, copy, blocks=10)
    assert max(disk, copy) < staged <= disk + copy
    assert staged_load_s(disk, copy, 1) == pytest.approx(disk + copy)  # one block: no overlap
    assert staged_load_s(disk, copy, 0) == 0.0


def test_capacity_counts_headers_and_padding():
    assert slots_for(100 * (MIB + 4096), MIB) == 100
    assert slots_for(100 * MIB, MIB) == 99
    assert slots_for(10 * 8192, 1) == 10  # a 1-byte payload still takes a header and a 4 KiB block


def test_bad_model_inputs():
    with pytest.raises(ValueError, match="queue_depth"):
        load_s(THIS_HOST, MIB, MIB, 0)
    with pytest.raises(ValueError, match="faster than the latency"):
        Direction.from_qd1(1e-3, 4096, 1e9, 2e9)
    assert load_s(THIS_HOST, 0, MIB, 1) == 0.0
