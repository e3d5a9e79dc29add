"""CUDA checks (skipped without a GPU; run by kernels/gpu_check.sh, with pytest or kernels/gpu_runner.py).

No fixtures: the plain runner must run these too. Each test records what it really built (`_record`) into
`$KVTK_GPU_CHECK_RECORD` when set, so gpu_check.json says which backend ran, not which one was asked for.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from toolkit.copy import Direction, OffloadWorker, RegionPair, WorkerConfig, allocate_host_mirrors
from toolkit.copy.regions import regions_from_tensors
from toolkit.core.metadata import StepMetadata, TransferBatch

pytestmark = pytest.mark.gpu


def _record(test: str, **facts) -> None:
    path = os.environ.get("KVTK_GPU_CHECK_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"test": test, **facts}) + "\n")


def _regions(num_blocks=33, sizes=(4096, 65536 + 512)):
    dev = {
        f"r{i}": torch.randint(-128, 128, (num_blocks, n), dtype=torch.int8, device="cuda") for i, n in enumerate(sizes)
    }
    return regions_from_tensors(dev)


def _pairs(regions, host):
    return [RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, host.mirrors)]


def _make(kind: str, pairs, **kw):
    from toolkit.copy.cuda_backend import CudaDmaBackend
    from toolkit.copy.triton_backend import TritonCopyBackend

    if kind == "triton":
        return TritonCopyBackend(store_pairs=pairs, host_pinned=True, **kw)
    per_block = kind == "dma-batch-per-block"  # vLLM's call shape: the benchmark's reference
    batched = kind.startswith("dma-batch")
    backend = CudaDmaBackend(store_pairs=pairs, use_batch_call=batched, coalesce=not per_block, **kw)
    if backend.variant != kind.removesuffix("-per-block"):
        backend.close()
        pytest.skip(f"{kind}: this driver has no cuMemcpyBatchAsync (needs CUDA 12.8+); only {backend.variant} runs")
    return backend


@pytest.mark.parametrize("kind", ["dma-batch", "dma-batch-per-block", "dma-loop", "triton"])
def test_gpu_round_trip_is_byte_exact(kind):
    regions = _regions()
    with allocate_host_mirrors(regions, num_host_blocks=21) as host:
        assert host.pinned
        backend = _make(kind, _pairs(regions, host))
        try:
            _record(f"round_trip[{kind}]", built=getattr(backend, "variant", backend.name))
            src, hst, dst = [0, 1, 2, 7, 32, 9], [3, 4, 5, 20, 0, 11], [10, 11, 12, 13, 31, 8]
            saved = [r.view[src].clone() for r in regions]
            backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=src, dst_block_ids=hst)
            backend.flush(30)  # loads and stores run on different streams: the host rows must land first
            backend.submit(direction=Direction.LOAD, event_id=1, src_block_ids=hst, dst_block_ids=dst)
            backend.flush(30)
            assert all(o.ok for o in backend.poll())
            for region, rows in zip(regions, saved):
                assert torch.equal(region.view[dst], rows)
        finally:
            backend.close()


def test_a_batch_enqueued_in_many_chunks_copies_every_block():
    from toolkit.copy.cuda_backend import descriptors_per_call

    regions = _regions(num_blocks=1200, sizes=(4096, 16384))
    with allocate_host_mirrors(regions, num_host_blocks=1200) as host:
        backend = _make("dma-batch", _pairs(regions, host))
        try:
            gen = torch.Generator().manual_seed(1)
            src, hst, dst = (torch.randperm(1200, generator=gen)[:700] for _ in range(3))
            assert 2 * 700 > 4 * descriptors_per_call(2 * 700)  # several calls per batch, in both directions
            saved = [r.view[src.cuda()].clone() for r in regions]
            backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=src, dst_block_ids=hst)
            backend.flush(30)
            backend.submit(direction=Direction.LOAD, event_id=1, src_block_ids=hst, dst_block_ids=dst)
            backend.flush(30)
            assert all(o.ok for o in backend.poll())
            _record("chunked_round_trip", built=backend.variant, calls_per_batch=-(-1400 // descriptors_per_call(1400)))
            for region, rows in zip(regions, saved):
                assert torch.equal(region.view[dst.cuda()], rows)
        finally:
            backend.close()


def _race_count(kind: str, direction: Direction, order_after_compute: bool, tries: int = 30) -> int:
    """Copies that did not see the compute stream's last kernel (a store) or were undone by it (a load)."""
    block = 8 << 20
    dev = torch.zeros(4, block, dtype=torch.int8, device="cuda")
    regions = regions_from_tensors({"kv": dev})
    races = 0
    with allocate_host_mirrors(regions, num_host_blocks=4) as host:
        backend = _make(kind, _pairs(regions, host), order_after_compute=order_after_compute)
        try:
            mirror = host.mirrors[0].view
            for i in range(tries):
                value = (i % 100) + 1
                if direction is Direction.STORE:
                    torch.cuda._sleep(2_000_000)  # the forward is still running on the compute stream ...
                    dev[1].fill_(value)  # ... and its last kernel writes the block about to be stored
                    backend.submit(direction=direction, event_id=i, src_block_ids=[1], dst_block_ids=[2])
                else:
                    mirror[2].fill_(value)
                    dev[1].fill_(-1)
                    torch.cuda._sleep(2_000_000)  # an earlier kernel still runs ...
                    seen = dev[1].clone()  # ... then one reads the block's old contents ...
                    dev[1].zero_()  # ... and vLLM zeroes the freshly allocated block
                    backend.submit(direction=direction, event_id=i, src_block_ids=[2], dst_block_ids=[1])
                backend.flush(30)
                assert all(o.ok for o in backend.poll())
                torch.cuda.synchronize()
                if direction is Direction.STORE:
                    races += not bool((mirror[2] == value).all())
                else:
                    races += not (bool((seen == -1).all()) and bool((dev[1] == value).all()))
        finally:
            backend.close()
    return races


@pytest.mark.parametrize("kind", ["dma-batch", "triton"])
@pytest.mark.parametrize("direction", [Direction.STORE, Direction.LOAD])
def test_copies_wait_for_compute_and_the_control_races(direction, kind):
    control = _race_count(kind, direction, order_after_compute=False)
    ordered = _race_count(kind, direction, order_after_compute=True)
    _record(f"race[{direction.value}-{kind}]", built=kind, control_races=control, ordered_races=ordered)
    assert control >= 1  # the control: proves the test can fail
    assert ordered == 0


def test_a_failed_registration_leaves_torch_working():
    from toolkit.copy.cuda_driver import CudaDriverError, driver_calls

    driver = driver_calls()
    buffer = torch.zeros(1 << 20, dtype=torch.int8)
    torch.cuda.synchronize()
    driver.register_host(buffer.data_ptr(), buffer.numel())
    try:
        with pytest.raises(CudaDriverError, match="cuMemHostRegister"):
            driver.register_host(buffer.data_ptr(), buffer.numel())  # already registered: fails
        x = torch.arange(1000, device="cuda").sum()  # the next kernel must not see a stale error
        torch.cuda.synchronize()
        assert int(x) == 999 * 1000 // 2
    finally:
        driver.unregister_host(buffer.data_ptr())
    _record("failed_registration", driver_cuda_version=driver.version())


def test_worker_drops_triton_over_pageable_mirrors_and_after_a_failed_warm_up():
    from toolkit.copy import triton_backend

    caches = {"kv": torch.zeros(32, 4096, dtype=torch.int8, device="cuda")}
    pageable = OffloadWorker.from_kv_caches(
        kv_caches=caches,
        config=WorkerConfig(num_host_blocks=16, fault_inject="", pin_host_memory=False, policy="static"),
    )
    try:
        assert "triton" not in pageable.backends and "pageable" in pageable.dropped_backends["triton"]
        assert "triton" not in pageable.policy.describe()
    finally:
        pageable.close()

    original = triton_backend.TritonCopyBackend._warm_up

    def failing_warm_up(self):
        raise triton_backend.TritonWarmUpFailed("no C compiler (simulated)")

    triton_backend.TritonCopyBackend._warm_up = failing_warm_up
    try:
        worker = OffloadWorker.from_kv_caches(
            kv_caches=caches, config=WorkerConfig(num_host_blocks=16, fault_inject="")
        )
    finally:
        triton_backend.TritonCopyBackend._warm_up = original
    try:
        assert "triton" not in worker.backends and "simulated" in worker.dropped_backends["triton"]
        assert worker.pick_backend(num_blocks=64, num_runs=64) == "cuda-dma"  # small batches: no Triton route
    finally:
        worker.close()


def test_worker_end_to_end_while_another_stream_keeps_the_gpu_busy():
    num_blocks, num_host = 64, 48
    # A synthetic paged KV cache: two attention layers with small pages, one larger state page per block.
    caches = {f"attn{i}": torch.randn(num_blocks, 2, 16, 8, 64, device="cuda").to(torch.bfloat16) for i in range(2)}
    caches["gdn"] = torch.randint(-128, 128, (num_blocks, 1, 1, 268288), dtype=torch.int8, device="cuda")
    worker = OffloadWorker.from_kv_caches(
        kv_caches=caches, config=WorkerConfig(num_host_blocks=num_host, fault_inject="")
    )
    busy = torch.cuda.Stream()
    try:
        _record(
            "worker_end_to_end",
            backends=sorted(worker.backends),
            dropped=worker.dropped_backends,
            policy=worker.policy.describe(),
            pinned=worker.host.pinned,
            dma=getattr(worker.backends.get("cuda-dma"), "variant", None),
        )
        a = torch.randn(4096, 4096, device="cuda")
        with torch.cuda.stream(busy):
            for _ in range(20):
                a = torch.tanh(a @ a)
        dev_ids = tuple(range(0, 40, 2))
        host_ids = tuple(range(47, 27, -1))
        saved = [r.view[list(dev_ids)].clone() for r in worker.regions]
        worker.apply(StepMetadata(store=TransferBatch(event_id=0, device_block_ids=dev_ids, host_block_ids=host_ids)))
        worker.flush()
        assert worker.collect().completed_store_event_ids == {0}
        for region in worker.regions:
            region.view[list(dev_ids)] = 0
        load_ids = tuple(range(41, 61))
        worker.apply(StepMetadata(load=TransferBatch(event_id=1, device_block_ids=load_ids, host_block_ids=host_ids)))
        worker.flush()
        report = worker.collect()
        assert report.completed_load_event_ids == {1} and not report.failed_load_event_ids
        for region, rows in zip(worker.regions, saved):
            assert torch.equal(region.view[list(load_ids)], rows), region.name
    finally:
        busy.synchronize()
        worker.close()
