"""vLLM's `kv_transfer_config` for the connectors the tools run, built in one place as plain dicts (no vllm import).

Every way the toolkit starts vLLM uses it: the harness (`KVTransferConfig(**config)`), the in-process engine
(`toolkit.vllm.live.start_llm`), the dry and live engines (a variant's extra config), and `kvtk serve` (the
`--kv-transfer-config` JSON). The keys of `kv_connector_extra_config` are the connector's (`config.py`).
"""

from __future__ import annotations

from typing import Any, Mapping

from toolkit.vllm.config import CONNECTORS, DEFAULT_EVICTION_POLICY

# The negative control's fault injection: every loaded block corrupted (`toolkit.vllm.config`'s fault_injection).
CORRUPT_EVERY_LOAD = "corrupt:every=1"


def kv_transfer_config(connector: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The `kv_transfer_config` of `connector` (a name in `CONNECTORS`) with `extra` as its
    `kv_connector_extra_config`; None for "none" (no connector). Failed loads are recomputed (the toolkit's
    connector refuses any other policy)."""
    if connector not in CONNECTORS:
        raise ValueError(f"connector: unknown connector {connector!r}; valid: {', '.join(CONNECTORS)}")
    entry = CONNECTORS[connector]
    if entry is None:
        return None
    name, module = entry
    return {
        "kv_connector": name,
        "kv_connector_module_path": module,
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": dict(extra or {}),
    }


def variant_extra_config(
    connector: str,
    *,
    cpu_bytes: int,
    policy: str = "eager",
    fine_grained: bool = True,
    eviction: str = DEFAULT_EVICTION_POLICY,
    fine_store_priority: str = "low",
    corrupt_loads: bool = False,
) -> dict[str, Any]:
    """`kv_connector_extra_config` of one experiment variant: vLLM's SimpleCPU keys for "simplecpu", the toolkit
    connector's for "toolkit", nothing for "none"."""
    if connector == "simplecpu":
        return {"cpu_bytes_to_use": int(cpu_bytes), "lazy_offload": policy == "lazy"}
    if connector != "toolkit":
        return {}
    extra: dict[str, Any] = {
        "cpu_bytes_to_use": int(cpu_bytes),
        "store_policy": policy,
        "fine_grained": bool(fine_grained),
        "eviction_policy": eviction,
        "fine_store_priority": fine_store_priority,
    }
    if corrupt_loads:
        extra["fault_injection"] = CORRUPT_EVERY_LOAD
    return extra
