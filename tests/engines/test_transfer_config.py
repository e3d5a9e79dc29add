"""The one `kv_transfer_config` builder (`toolkit.vllm.transfer_config`): the dicts every caller used to build by
hand, and no vLLM import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit.engines.base import VariantSpec
from toolkit.vllm.transfer_config import kv_transfer_config, variant_extra_config


def test_connector_entries():
    assert kv_transfer_config("toolkit", {"cpu_bytes_to_use": 1}) == {
        "kv_connector": "HybridOffloadConnector",
        "kv_connector_module_path": "toolkit.vllm",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 1},
    }
    simple = kv_transfer_config("simplecpu")
    assert simple["kv_connector"] == "SimpleCPUReferenceConnector"
    assert simple["kv_connector_module_path"] == "toolkit.vllm.reference"
    assert simple["kv_connector_extra_config"] == {}
    assert kv_transfer_config("none") is None
    with pytest.raises(ValueError, match="valid: toolkit, simplecpu, none"):
        kv_transfer_config("lmcache")


def test_extra_is_copied():
    extra = {"cpu_bytes_to_use": 1}
    config = kv_transfer_config("toolkit", extra)
    config["kv_connector_extra_config"]["x"] = 2
    assert extra == {"cpu_bytes_to_use": 1}


def test_variant_extra_config():
    main = VariantSpec(name="toolkit")
    assert main.connector_extra_config(1 << 20) == {
        "cpu_bytes_to_use": 1 << 20,
        "store_policy": "eager",
        "fine_grained": True,
        "eviction_policy": "slru",
        "fine_store_priority": "low",
    }
    control = VariantSpec(name="corrupted_kv", corrupt_loads=True, eviction="lru", fine_store_priority="equal")
    assert control.connector_extra_config(8)["fault_injection"] == "corrupt:every=1"
    assert control.connector_extra_config(8)["eviction_policy"] == "lru"
    lazy_simple = VariantSpec(name="simplecpu", connector="simplecpu", policy="lazy")
    assert lazy_simple.connector_extra_config(8) == {"cpu_bytes_to_use": 8, "lazy_offload": True}
    assert variant_extra_config("none", cpu_bytes=8) == {}


def test_serve_command_uses_the_builder():
    from toolkit.serve.command import kv_transfer_config as serve_config

    assert serve_config("toolkit", cpu_bytes=4, extra={"eviction_policy": "lru"}) == kv_transfer_config(
        "toolkit", {"cpu_bytes_to_use": 4, "eviction_policy": "lru"}
    )
    assert serve_config("simplecpu", cpu_bytes=4) == kv_transfer_config("simplecpu")


def test_no_vllm_import():
    code = "import sys, toolkit.vllm.transfer_config, toolkit.serve.command; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
