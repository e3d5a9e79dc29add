"""The native batched copy's code paths (streaming stores, prefetch cursor, thread split, source-ordered issue),
the id checks' two uniqueness branches, and huge-page host buffers with their fallbacks."""

from __future__ import annotations

import hashlib
import shutil

import pytest
import torch

from toolkit.copy import CpuCopyBackend, Direction, RegionPair, allocate_host_mirrors, build_descriptors, hugepages
from toolkit.copy.descriptors import check_ids, sort_by_source
from toolkit.copy.native import load_native_copy, native_has_streaming_stores
from toolkit.copy.regions import regions_from_tensors

needs_native = pytest.mark.skipif(load_native_copy() is None, reason="no native copy library (no C compiler)")


def _random(shape, seed):
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=torch.Generator().manual_seed(seed))


def _copy(src_view, dst_view, src_ids, dst_ids, *, nt_min_bytes, num_threads, native=True):
    backend = CpuCopyBackend(
        store_pairs=[RegionPair(name="r", src=src_view, dst=dst_view)],
        use_native=native,
        asynchronous=False,
        num_threads=num_threads,
        nt_min_bytes=nt_min_bytes,
    )
    backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=src_ids, dst_block_ids=dst_ids)
    backend.flush()
    assert [o.ok for o in backend.poll()] == [True]
    backend.close()


@needs_native
@pytest.mark.parametrize("nt_min_bytes", [0, -1], ids=["streaming", "cached"])
@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("row_bytes,offset", [(4096, 0), (1000, 3), (70_000, 17), (64, 64)])
def test_native_scatter_is_byte_exact(nt_min_bytes, num_threads, row_bytes, offset):
    # Enough bytes (> 2 MiB) that two threads really split the batch, rows that start off a cache line, sizes that
    # leave head and tail bytes around the 256-byte streaming steps, and repeated sources.
    rows = max(8, (6 << 20) // row_bytes)
    src_alloc = _random((offset + rows * row_bytes,), 1)
    src = src_alloc[offset:].view(rows, row_bytes)
    dst_alloc = _random((rows * row_bytes + 5,), 2)
    dst = dst_alloc[5:].view(rows, row_bytes)
    g = torch.Generator().manual_seed(3)
    dst_ids = torch.randperm(rows, generator=g)[: rows * 3 // 4]
    src_ids = torch.randint(0, rows, (dst_ids.numel(),), generator=g)  # repeats on purpose
    src_ids[:3] = torch.tensor([5, 6, 7])  # and a run that coalesces
    dst_ids[:3] = torch.tensor([rows - 3, rows - 2, rows - 1]) if rows - 1 not in dst_ids[3:] else dst_ids[:3]
    expected = dst.clone()
    expected[dst_ids] = src[src_ids]
    before = dst_alloc[:5].clone()
    _copy(src, dst, src_ids, dst_ids, nt_min_bytes=nt_min_bytes, num_threads=num_threads)
    assert torch.equal(dst, expected)
    assert torch.equal(dst_alloc[:5], before)  # nothing written before the first row


@needs_native
def test_streaming_and_cached_stores_agree_with_the_torch_fallback():
    src = _random((300, 3000), 4)
    dst_ids = torch.randperm(300, generator=torch.Generator().manual_seed(5))[:200]
    src_ids = torch.randint(0, 300, (200,), generator=torch.Generator().manual_seed(6))
    results = []
    for native, nt in ((True, 0), (True, -1), (False, -1)):
        dst = torch.zeros(300, 3000, dtype=torch.int8)
        _copy(src, dst, src_ids, dst_ids, nt_min_bytes=nt, num_threads=2, native=native)
        results.append(dst)
    assert torch.equal(results[0], results[2]) and torch.equal(results[1], results[2])


def test_streaming_store_support_is_reported():
    assert isinstance(native_has_streaming_stores(), bool)
    backend = CpuCopyBackend(
        store_pairs=[
            RegionPair(name="r", src=torch.zeros(2, 8, dtype=torch.int8), dst=torch.zeros(2, 8, dtype=torch.int8))
        ],
        asynchronous=False,
    )
    assert backend.nt_min_bytes > 0  # default: half the last-level cache, never every batch
    backend.close()


def test_sort_by_source_keeps_every_pair_and_repeated_sources_in_order():
    src, dst = torch.tensor([7, 2, 7, 0, 2, 9]), torch.tensor([0, 1, 2, 3, 4, 5])
    s, d = sort_by_source(src, dst)
    assert s.tolist() == [0, 2, 2, 7, 7, 9]
    assert d.tolist() == [3, 1, 4, 0, 2, 5]  # stable: equal sources keep their given order
    same_s, same_d = sort_by_source(s, d)
    assert same_s is s and same_d is d  # already sorted: no copy


def test_sorted_descriptors_coalesce_runs_given_out_of_order():
    src_view, dst_view = torch.zeros(10, 64, dtype=torch.int8), torch.zeros(10, 64, dtype=torch.int8)
    pair = RegionPair(name="d", src=src_view, dst=dst_view)
    src, dst = torch.tensor([5, 3, 4]), torch.tensor([8, 6, 7])
    assert build_descriptors([pair], src, dst).count == 2  # (5->8) then run (3,4 -> 6,7)
    d = build_descriptors([pair], src, dst, sort_sources=True)
    assert d.count == 1 and d.sizes.tolist() == [3 * 64]
    assert d.srcs.tolist() == [src_view.data_ptr() + 3 * 64] and d.dsts.tolist() == [dst_view.data_ptr() + 6 * 64]


@pytest.mark.parametrize("bound", [8, 1000])  # histogram branch, torch.unique branch
def test_repeated_destinations_are_caught_on_both_check_paths(bound):
    with pytest.raises(ValueError, match="dst_block_ids"):
        check_ids(torch.tensor([0, 1, 2]), torch.tensor([4, 6, 4]), num_src_blocks=bound, num_dst_blocks=bound)
    check_ids(torch.tensor([0, 0, 2]), torch.tensor([4, 6, 5]), num_src_blocks=bound, num_dst_blocks=bound)


def test_huge_page_buffers_are_zeroed_aligned_and_writable():
    t = hugepages.allocate_zeroed(3 * hugepages.HUGE_PAGE_BYTES + 123)
    assert t.dtype == torch.int8 and t.numel() == 3 * hugepages.HUGE_PAGE_BYTES + 123
    assert not bool(t.any())
    if hugepages.thp_mode() != "never":
        assert t.data_ptr() % hugepages.HUGE_PAGE_BYTES == 0
    t[-1] = 7
    view = t[10:20]
    del t  # the view keeps the mapping alive
    import gc

    gc.collect()
    assert view.tolist() == [0] * 10
    assert hugepages.huge_page_bytes(view) >= 0


def test_huge_pages_fall_back_to_torch_zeros(monkeypatch):
    small = hugepages.allocate_zeroed(4096)
    assert small.numel() == 4096 and not bool(small.any())
    off = hugepages.allocate_zeroed(4 << 20, huge_pages=False)
    assert off.numel() == 4 << 20 and not bool(off.any())

    def no_mapping(*args, **kwargs):
        raise OSError("no anonymous mappings here")

    monkeypatch.setattr(hugepages.mmap, "mmap", no_mapping)
    fallback = hugepages.allocate_zeroed(4 << 20)
    assert fallback.numel() == 4 << 20 and not bool(fallback.any())


def test_failed_advice_and_populate_still_give_zeroed_pages(monkeypatch):
    calls = []

    def refuse(mapping, advice, start, length):
        calls.append(advice)
        raise OSError("EINVAL")

    monkeypatch.setattr(hugepages, "_madvise", refuse)
    t = hugepages.allocate_zeroed(4 << 20)
    assert t.numel() == 4 << 20 and not bool(t.any())
    if hugepages.thp_mode() != "never":
        assert len(calls) == 2  # huge-page advice, then populate; both refused, the buffer still works
    t[:] = 1
    assert int(t.sum()) == 4 << 20


def test_host_mirrors_on_huge_pages_or_not_round_trip():
    caches = {"kv": _random((6, 1 << 20), 8)}
    regions = regions_from_tensors(caches)
    for huge in (True, False):
        with allocate_host_mirrors(regions, num_host_blocks=4, huge_pages=huge) as host:
            assert not bool(host.mirrors[0].view.any())
            pair = RegionPair(name="kv", src=regions[0].view, dst=host.mirrors[0].view)
            backend = CpuCopyBackend(store_pairs=[pair], asynchronous=False, nt_min_bytes=0)
            try:
                backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=[5, 1], dst_block_ids=[0, 3])
                backend.flush()
                assert torch.equal(host.mirrors[0].view[[0, 3]], caches["kv"][[5, 1]])
            finally:
                backend.close()


def test_native_library_is_loaded_only_from_a_private_owned_place(tmp_path):
    from toolkit.copy.native import _owned_and_private

    folder = tmp_path / "native"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    lib = folder / "lib.so"
    lib.write_bytes(b"\x7fELF")
    lib.chmod(0o700)
    assert _owned_and_private(lib)
    lib.chmod(0o766)  # anyone may rewrite the code we would load
    assert not _owned_and_private(lib)
    lib.chmod(0o700)
    folder.chmod(0o777)  # anyone may swap the file
    assert not _owned_and_private(lib)


def _fresh_native(monkeypatch, cache_dir):
    from toolkit.copy import native

    monkeypatch.setenv("KVTK_CACHE_DIR", str(cache_dir))
    monkeypatch.delenv("KVTK_NO_NATIVE", raising=False)
    native._load_library.cache_clear()
    native.load_native_copy.cache_clear()
    return native


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_a_tampered_native_library_is_refused_and_a_missing_hash_rebuilds(tmp_path, monkeypatch):
    native = _fresh_native(monkeypatch, tmp_path / "cache")
    try:
        assert native._load_library() is not None  # built, hash recorded
        (lib,) = (tmp_path / "cache" / "native").glob("*.so")
        sidecar = native._sidecar(lib)
        assert sidecar.read_text().strip() == hashlib.sha256(lib.read_bytes()).hexdigest()
        assert not list((tmp_path / "cache" / "native").glob("tmp*"))  # no build leftovers
        # Someone replaced the code we would load (a new file: the loaded one stays mapped, as on any replace).
        tampered = lib.read_bytes() + b"\0"
        lib.unlink()
        lib.write_bytes(tampered)
        lib.chmod(0o700)
        native._load_library.cache_clear()
        assert native._load_library() is None
        sidecar.unlink()  # no recorded hash: built again, then loaded
        native._load_library.cache_clear()
        assert native._load_library() is not None and sidecar.exists()
    finally:
        native._load_library.cache_clear()
        native.load_native_copy.cache_clear()


def test_a_failed_native_build_leaves_nothing_behind(tmp_path, monkeypatch):
    native = _fresh_native(monkeypatch, tmp_path / "cache")
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    try:
        assert native._load_library() is None
        assert list((tmp_path / "cache" / "native").iterdir()) == []
    finally:
        native._load_library.cache_clear()
        native.load_native_copy.cache_clear()
