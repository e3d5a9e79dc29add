"""`--record-cache-state`: the cache-state visualizer's recording of a run's main variant, in its run folder.

The recorder (`toolkit.viz.run_recorder`) subscribes to the toolkit connector's manager where it runs in this
process: the dry engine's harness and the live engine's in-process vLLM. A server's connector runs in the server's
engine-core process, which a client cannot observe, and vLLM's SimpleCPU has no toolkit manager: for those the run
goes on, nothing is recorded, and one line on stderr says why (no file is written, nothing is made up).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.engines.base import Engine, VariantSpec
    from toolkit.experiments.config import ExperimentConfig


def start_recording(config: ExperimentConfig, engine: Engine, spec: VariantSpec, run_dir: Path) -> Any | None:
    """A `RunRecorder` watching `engine`'s connector from now on (its `close()` writes `cache_state.jsonl`), or
    None: not asked for, or nothing in this process to watch (said once on stderr)."""
    if not config.record_cache_state:
        return None
    manager = engine.offload_manager()
    if manager is None:
        print(f"--record-cache-state: nothing recorded: {_why_not(config, spec)}", file=sys.stderr)
        return None
    from toolkit.viz.recording import RECORDING_NAME
    from toolkit.viz.run_recorder import RunRecorder

    source = (
        f"kvtk replay --engine {config.engine} --model {config.model} --trace {config.workload.trace}: "
        f"variant {spec.name} (policy {spec.policy}, eviction {spec.eviction}, fine-grained {spec.fine_grained})"
    )
    return RunRecorder(manager, run_dir / RECORDING_NAME, source=source)


def _why_not(config: ExperimentConfig, spec: VariantSpec) -> str:
    if config.engine == "server":
        return (
            "the server's connector runs in the server's engine-core process, which this client cannot observe; "
            "start the server with kvtk serve --record-cache-state PATH (its connector writes the recording there)"
        )
    return f"the main variant's connector ({spec.connector}) is not the toolkit's; there is no manager to watch"
