"""Start-up decisions, CPU-side: pinning through a registrar, the Triton warm-up, dropping backends that fail."""

from __future__ import annotations

import ctypes
import logging
import types

import pytest
import torch

from toolkit.copy import RegionPair, allocate_host_mirrors, regions_from_tensors
from toolkit.copy.backend_setup import ProbeCopyFailed, choose_policy
from toolkit.copy.policy import CUDA_DMA, TRITON, BackendPolicy


class FakeRegistrar:
    def __init__(self, fail_at: int | None = None):
        self.fail_at, self.registered, self.calls = fail_at, [], 0

    def register_host(self, ptr, size):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("cuMemHostRegister: CUDA_ERROR_OUT_OF_MEMORY (2)")
        self.registered.append(ptr)

    def unregister_host(self, ptr):
        self.registered.remove(ptr)


def _regions():
    return regions_from_tensors(
        {"a": torch.zeros(4, 256, dtype=torch.int8), "b": torch.zeros(4, 512, dtype=torch.int8)}
    )


def test_mirrors_pin_through_the_registrar_and_unpin_on_leaving_the_block():
    registrar = FakeRegistrar()
    with allocate_host_mirrors(_regions(), num_host_blocks=3, pin=True, registrar=registrar) as host:
        assert host.pinned and len(registrar.registered) == 2
    assert registrar.registered == [] and not host.pinned and host.mirrors == ()


def test_a_failed_registration_unpins_everything_and_stays_pageable(caplog):
    registrar = FakeRegistrar(fail_at=2)
    with (
        caplog.at_level(logging.WARNING),
        allocate_host_mirrors(_regions(), num_host_blocks=3, pin=True, registrar=registrar) as host,
    ):
        assert not host.pinned and registrar.registered == []  # all or nothing
        assert host.mirrors[1].view.shape == (3, 512)  # still usable, pageable
    assert any("OUT_OF_MEMORY" in r.message and "pageable" in r.message for r in caplog.records)


def test_without_a_cuda_driver_pinning_warns_and_stays_pageable(caplog):
    with caplog.at_level(logging.WARNING), allocate_host_mirrors(_regions(), num_host_blocks=2, pin=True) as host:
        assert not host.pinned
    assert any("pageable" in r.message for r in caplog.records)


class FakeBackend:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_a_backend_whose_probe_fails_is_dropped_from_the_policy():
    backends = {CUDA_DMA: FakeBackend(), TRITON: FakeBackend()}
    triton = backends[TRITON]
    dropped, asked = {}, []

    def measure(names, default):
        asked.append(sorted(names))
        raise ProbeCopyFailed(TRITON, "CalledProcessError: gcc not found")

    policy = choose_policy(None, "cuda", backends, dropped, measure)
    assert asked == [[CUDA_DMA, TRITON]]  # with one backend left there is nothing to measure
    assert list(backends) == [CUDA_DMA] and triton.closed and "gcc" in dropped[TRITON]
    assert policy == BackendPolicy(default=CUDA_DMA)
    assert policy.pick(bytes_per_descriptor=4096, num_descriptors=64, available=backends) == CUDA_DMA


def test_a_failed_probe_of_the_default_backend_keeps_the_static_table():
    backends = {CUDA_DMA: FakeBackend(), TRITON: FakeBackend()}

    def measure(names, default):
        raise ProbeCopyFailed(CUDA_DMA, "timeout")

    policy = choose_policy(None, "cuda", backends, {}, measure)
    assert policy.default == CUDA_DMA and len(backends) == 2


def _kernel(launch):
    return types.SimpleNamespace(check_descriptors=lambda *columns: 1, launch_table=launch)


def test_triton_backend_exists_only_after_its_warm_up_copy_succeeds(monkeypatch):
    from toolkit.copy.triton_backend import TritonCopyBackend, TritonWarmUpFailed

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # lets the CPU views through; the kernel itself is a fake
    dev, host = torch.zeros(4, 64, dtype=torch.int8), torch.arange(4 * 64, dtype=torch.int8).view(4, 64)
    pairs = [RegionPair(name="kv", src=dev, dst=host)]

    def no_compiler(table, programs):
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")

    with pytest.raises(TritonWarmUpFailed, match="C compiler"):
        TritonCopyBackend(store_pairs=pairs, kernel=_kernel(no_compiler))
    with pytest.raises(TritonWarmUpFailed, match="differ"):  # launched, but copied nothing
        TritonCopyBackend(store_pairs=pairs, kernel=_kernel(lambda table, programs: None))

    def copies(table, programs):
        for src, dst, size in table.T.tolist():  # what the kernel does, through raw addresses
            ctypes.memmove(dst, src, size)

    backend = TritonCopyBackend(store_pairs=pairs, kernel=_kernel(copies))
    backend.close()
