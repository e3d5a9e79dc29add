"""The timed subclass (`timed.timed_subclass`) of every connector the tools run, by the name vLLM's connector
factory looks up (`kv_connector_module_path` = this module, `kv_connector` = "Timed" + the connector's class)."""

from __future__ import annotations

from toolkit.engines.harness.timed import timed_subclass
from toolkit.vllm.connector import HybridOffloadConnector
from toolkit.vllm.reference import SimpleCPUReferenceConnector

TimedHybridOffloadConnector = timed_subclass(HybridOffloadConnector)
TimedSimpleCPUReferenceConnector = timed_subclass(SimpleCPUReferenceConnector)
