"""CUDA checks (skipped without a GPU; run by kernels/gpu_check.sh)."""

from __future__ import annotations

import pytest
import torch

from toolkit.copy import Direction, OffloadWorker, RegionPair, WorkerConfig, allocate_host_mirrors
from toolkit.copy.regions import regions_from_tensors
from toolkit.core.metadata import StepMetadata, TransferBatch

pytestmark = pytest.mark.gpu


def _pairs(num_blocks=33, num_host=21, sizes=(4096, 65536 + 512)):
    dev = {f"r{i}": torch.randint(-128, 128, (num_blocks, n), dtype=torch.int8, device="cuda")
           for i, n in enumerate(sizes)}
    regions = regions_from_tensors(dev)
    host = allocate_host_mirrors(regions, num_host_blocks=num_host)
    return regions, host, [RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, host.mirrors)]


@pytest.mark.parametrize("kind", ["dma-batch", "dma-loop", "triton"])
def test_gpu_round_trip_is_byte_exact(kind):
    from toolkit.copy.cuda_backend import CudaDmaBackend
    from toolkit.copy.triton_backend import TritonCopyBackend

    regions, host, pairs = _pairs()
    assert host.pinned
    backend = (TritonCopyBackend(store_pairs=pairs) if kind == "triton"
               else CudaDmaBackend(store_pairs=pairs, use_batch_call=kind == "dma-batch"))
    src, hst, dst = [0, 1, 2, 7, 32, 9], [3, 4, 5, 20, 0, 11], [10, 11, 12, 13, 31, 8]
    saved = [r.view[src].clone() for r in regions]
    backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=src, dst_block_ids=hst)
    backend.flush(30)  # loads and stores run on different streams: the host rows must land first
    backend.submit(direction=Direction.LOAD, event_id=1, src_block_ids=hst, dst_block_ids=dst)
    backend.flush(30)
    assert all(o.ok for o in backend.poll())
    for region, rows in zip(regions, saved):
        assert torch.equal(region.view[dst], rows)
    backend.close()
    host.close()


def _store_race_count(order_after_compute: bool, tries: int = 30) -> int:
    from toolkit.copy.cuda_backend import CudaDmaBackend

    block = 8 << 20
    dev = torch.zeros(4, block, dtype=torch.int8, device="cuda")
    regions = regions_from_tensors({"kv": dev})
    host = allocate_host_mirrors(regions, num_host_blocks=4)
    backend = CudaDmaBackend(store_pairs=[RegionPair(name="kv", src=regions[0].view, dst=host.mirrors[0].view)],
                             order_stores_after_compute=order_after_compute)
    races = 0
    for i in range(tries):
        value = (i % 100) + 1
        torch.cuda._sleep(2_000_000)        # the forward is still running on the compute stream ...
        dev[1].fill_(value)                 # ... and its last kernel writes the block about to be stored
        backend.submit(direction=Direction.STORE, event_id=i, src_block_ids=[1], dst_block_ids=[2])
        backend.flush(30)
        assert all(o.ok for o in backend.poll())
        if not bool((host.mirrors[0].view[2] == value).all()):
            races += 1
    backend.close()
    host.close()
    return races


def test_store_waits_for_compute_and_the_control_races():
    assert _store_race_count(order_after_compute=False) >= 1  # the control: proves the test can fail
    assert _store_race_count(order_after_compute=True) == 0


def test_worker_end_to_end_while_another_stream_keeps_the_gpu_busy():
    num_blocks, num_host = 64, 48
    # A synthetic paged KV cache: two attention layers with small pages, one larger state page per block.
    caches = {f"attn{i}": torch.randn(num_blocks, 2, 16, 8, 64, device="cuda").to(torch.bfloat16) for i in range(2)}
    caches["gdn"] = torch.randint(-128, 128, (num_blocks, 1, 1, 268288), dtype=torch.int8, device="cuda")
    worker = OffloadWorker.from_kv_caches(kv_caches=caches, config=WorkerConfig(num_host_blocks=num_host,
                                                                                fault_inject=""))
    busy = torch.cuda.Stream()
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
    busy.synchronize()
    worker.close()
