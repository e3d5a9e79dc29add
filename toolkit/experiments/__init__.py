"""Experiments: cold / hot / pressure / replay runs of the toolkit and its baselines on real vLLM.

Public API (heavy packages are imported only when a run starts):

- `ExperimentConfig` (config.py): one experiment's settings in sections (workload, variant, dry, live), made by
  `ExperimentConfig.from_params` for the CLI, the sweep and the notebooks alike;
- `Plan` (plan.py: `plan.plan(config)`) and `execute`, `run_experiment`, `ExperimentResult` (runner.py): what
  will run, decided and checked before the run folder exists, then the run itself (all variants, a run folder);
- `Trace`, `load_trace`, `write_trace`, `TraceRecorder`, `TraceError` (traces.py): the `kvtk.trace/1` JSONL format;
- `few_shot`, `agentic`, `long_document`, `pressure`, `resolve_trace` (workloads.py): seeded generators;
- `oracle_reusable_tokens`, `simulate_cache` (oracle.py): the infinite-tier and Belady bounds;
- `load_run` (results.py): read a run folder back, finished or not.

Layering: this package sits above `toolkit.vllm` (the dry engine drives its harness, the live engine loads its
connector); it never imports vllm at module import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name -> its module, imported on first use: `kvtk` builds its parser from `config_fields.py`
# without numpy and polars, which the oracle and the results need (a wheel installs without them).
_MODULE_OF = {
    "RequestRecord": "toolkit.engines.records",
    "PHASES": "toolkit.experiments.config",
    "ExperimentConfig": "toolkit.experiments.config",
    "oracle_reusable_tokens": "toolkit.experiments.oracle",
    "simulate_cache": "toolkit.experiments.oracle",
    "Plan": "toolkit.experiments.plan",
    "load_run": "toolkit.experiments.results",
    "ExperimentResult": "toolkit.experiments.runner",
    "execute": "toolkit.experiments.runner",
    "run_experiment": "toolkit.experiments.runner",
    "agentic": "toolkit.workloads.generators",
    "few_shot": "toolkit.workloads.generators",
    "long_document": "toolkit.workloads.generators",
    "pressure": "toolkit.workloads.generators",
    "resolve_trace": "toolkit.workloads.resolve",
    "load_trace": "toolkit.workloads.trace_parser",
    "Trace": "toolkit.workloads.traces",
    "TraceError": "toolkit.workloads.traces",
    "TraceRecorder": "toolkit.workloads.traces",
    "write_trace": "toolkit.workloads.traces",
}

if TYPE_CHECKING:
    from toolkit.engines.records import RequestRecord
    from toolkit.experiments.config import PHASES, ExperimentConfig
    from toolkit.experiments.oracle import oracle_reusable_tokens, simulate_cache
    from toolkit.experiments.plan import Plan
    from toolkit.experiments.results import load_run
    from toolkit.experiments.runner import ExperimentResult, execute, run_experiment
    from toolkit.workloads.generators import agentic, few_shot, long_document, pressure
    from toolkit.workloads.resolve import resolve_trace
    from toolkit.workloads.trace_parser import load_trace
    from toolkit.workloads.traces import Trace, TraceError, TraceRecorder, write_trace


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)


__all__ = [
    "PHASES",
    "ExperimentConfig",
    "ExperimentResult",
    "Plan",
    "RequestRecord",
    "Trace",
    "TraceError",
    "TraceRecorder",
    "agentic",
    "execute",
    "few_shot",
    "load_run",
    "load_trace",
    "long_document",
    "oracle_reusable_tokens",
    "pressure",
    "resolve_trace",
    "run_experiment",
    "simulate_cache",
    "write_trace",
]
