"""Pure parts shared by the pointer backends (descriptors, coalescing), the policy table, host mirrors."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from toolkit.copy import RegionPair, allocate_host_mirrors, build_descriptors, coalesce_runs, parse_policy
from toolkit.copy.policy import BackendPolicy, PolicyRule, default_policy, policy_from_timings
from toolkit.copy.regions import regions_from_tensors


def ids(*values):
    return torch.tensor(values, dtype=torch.int64)


def test_runs_need_both_sides_consecutive():
    runs = coalesce_runs(ids(4, 5, 6, 9, 10, 2), ids(0, 1, 2, 3, 7, 8))
    assert runs.src_starts.tolist() == [4, 9, 10, 2]
    assert runs.dst_starts.tolist() == [0, 3, 7, 8]
    assert runs.lengths.tolist() == [3, 1, 1, 1]


def test_descriptors_coalesce_dense_rows_and_split_strided_ones():
    dense_src = torch.zeros(10, 64, dtype=torch.int8)
    dense_dst = torch.zeros(6, 64, dtype=torch.int8)
    strided_src = torch.zeros(10, 128, dtype=torch.int8)[:, :32]
    strided_dst = torch.zeros(6, 32, dtype=torch.int8)
    pairs = [RegionPair(name="d", src=dense_src, dst=dense_dst), RegionPair(name="s", src=strided_src, dst=strided_dst)]
    d = build_descriptors(pairs, ids(2, 3, 4, 8), ids(0, 1, 2, 5))
    base = dense_src.data_ptr(), dense_dst.data_ptr(), strided_src.data_ptr(), strided_dst.data_ptr()
    assert d.srcs.tolist() == [base[0] + 2 * 64, base[0] + 8 * 64] + [base[2] + i * 128 for i in (2, 3, 4, 8)]
    assert d.dsts.tolist() == [base[1], base[1] + 5 * 64] + [base[3] + i * 32 for i in (0, 1, 2, 5)]
    assert d.sizes.tolist() == [3 * 64, 64, 32, 32, 32, 32]
    assert d.total_bytes == 4 * 64 + 4 * 32
    per_block = build_descriptors(pairs, ids(2, 3, 4, 8), ids(0, 1, 2, 5), coalesce=False)  # vLLM's call shape
    assert per_block.srcs.tolist()[:4] == [base[0] + i * 64 for i in (2, 3, 4, 8)]
    assert per_block.sizes.tolist() == [64] * 4 + [32] * 4 and per_block.total_bytes == d.total_bytes


def test_policy_table_from_timings_and_override_syntax():
    timings = {
        ("triton", 4096): 1.0,
        ("cuda-dma", 4096): 2.0,
        ("triton", 32768): 2.0,
        ("cuda-dma", 32768): 1.9,
        ("triton", 1 << 20): 9.0,
        ("cuda-dma", 1 << 20): 5.0,
    }
    policy = policy_from_timings(timings, default="cuda-dma")
    assert policy == BackendPolicy(
        rules=(PolicyRule(backend="triton", max_bytes_per_descriptor=4096),), default="cuda-dma"
    )
    assert policy.pick(bytes_per_descriptor=2048, num_descriptors=64, available=["triton", "cuda-dma"]) == "triton"
    assert policy.pick(bytes_per_descriptor=2048, num_descriptors=64, available=["cuda-dma"]) == "cuda-dma"
    floored = policy_from_timings(timings, default="cuda-dma", min_descriptors={"triton": 512})
    assert floored.rules == (PolicyRule(backend="triton", max_bytes_per_descriptor=4096, min_descriptors=512),)
    assert floored.pick(bytes_per_descriptor=2048, num_descriptors=64, available=["triton", "cuda-dma"]) == "cuda-dma"
    assert floored.pick(bytes_per_descriptor=2048, num_descriptors=512, available=["triton", "cuda-dma"]) == "triton"
    parsed = parse_policy("triton<=28672@16,cuda-dma")
    assert parsed.pick(bytes_per_descriptor=8192, num_descriptors=8, available=["triton", "cuda-dma"]) == "cuda-dma"
    assert parsed.pick(bytes_per_descriptor=8192, num_descriptors=32, available=["triton", "cuda-dma"]) == "triton"
    assert parse_policy(parsed.describe()) == parsed
    assert default_policy("cpu", ["cpu"]).default == "cpu"
    with pytest.raises(ValueError, match="policy"):
        parse_policy("triton<=big,cuda-dma")


def test_mmap_host_mirrors_are_owner_only_and_zeroed(tmp_path):
    regions = regions_from_tensors(
        {"a": torch.ones(5, 100, dtype=torch.int8), "b": torch.ones(5, 3000, dtype=torch.int8)}
    )
    path = str(tmp_path / "mirror.bin")
    with allocate_host_mirrors(regions, num_host_blocks=7, mmap_path=path) as host:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert [tuple(m.view.shape) for m in host.mirrors] == [(7, 100), (7, 3000)]
        assert all(int(m.view.abs().sum()) == 0 for m in host.mirrors)
        host.mirrors[1].view[6] = 3
        assert not host.pinned
    assert not os.path.exists(path)
    with pytest.raises(ValueError, match="num_host_blocks"):
        allocate_host_mirrors(regions, num_host_blocks=0)


def test_dma_calls_split_a_batch_in_sixteenths_of_64_to_256_descriptors():
    from toolkit.copy.cuda_backend import descriptors_per_call

    assert [descriptors_per_call(n) for n in (1, 1024, 1600, 4096, 65536)] == [64, 64, 100, 256, 256]


def test_dma_shape_bench_says_when_there_is_no_gpu(capsys):
    from toolkit.cli.main import main

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the benchmark would run")
    assert main(["bench", "dma-shape", "--chunks", "auto", "all", "64"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--device: no CUDA device visible (this benchmark times the CUDA driver's batched copy)")
    )
    with pytest.raises(SystemExit) as exc:
        main(["bench", "dma-shape", "--chunks", "0"])
    assert exc.value.code == 2 and "--chunks" in capsys.readouterr().err
