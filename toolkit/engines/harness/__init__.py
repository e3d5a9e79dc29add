"""Engine-less harness: vLLM's real `Scheduler` + `KVCacheManager` with a KV connector, and no model runner.

Used by the dry engine, the scheduler benchmark and the tests; it is not part of the connector vLLM loads.
One concept per module:

- `shapes.py`: the KV cache layouts it fabricates for the tiny models (`HarnessShape`, `SHAPES`) and the engine
  configuration read from a tiny model's HF config (`build_base_config`);
- `timed.py`: the one wrapper of a connector's scheduler hooks (any connector): their time and admissions;
- `workers.py`: what stands in for the model runner's connector calls (`drive_worker`, `instant_output`) and the
  loads a step's metadata carries (`loaded_pairs_of`);
- `outputs.py`: what it fabricates in the model runner's place (sampled tokens, `ModelRunnerOutput`);
- `stall.py`: `StallWatch` and `HarnessStalled`, a scheduler that stopped scheduling while requests wait;
- `driver.py`: `Harness`, which adds requests, steps the scheduler with fabricated outputs, and records them;
- `phases.py`: `Phase` and `run_phases`, request streams in waves with prefix-cache resets between them.

Real model geometries (presets) are fabricated with the experiments, in `toolkit/engines/geometry_layout.py`.
"""

from toolkit.engines.harness.driver import Harness, RequestRecord, StepRecord
from toolkit.engines.harness.phases import Phase, run_phases
from toolkit.engines.harness.shapes import SHAPES, HarnessShape, build_base_config, build_kv_cache_config
from toolkit.engines.harness.stall import HarnessStalled
from toolkit.engines.harness.workers import drive_worker, instant_output, loaded_pairs_of
from toolkit.vllm.config import CONNECTORS

__all__ = [
    "CONNECTORS",
    "SHAPES",
    "Harness",
    "HarnessShape",
    "HarnessStalled",
    "Phase",
    "RequestRecord",
    "StepRecord",
    "build_base_config",
    "build_kv_cache_config",
    "drive_worker",
    "instant_output",
    "loaded_pairs_of",
    "run_phases",
]
