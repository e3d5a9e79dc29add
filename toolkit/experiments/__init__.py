"""Experiments: cold / hot / pressure / replay runs of the toolkit and its baselines on real vLLM.

Public API (heavy packages are imported only when a run starts):

- `ExperimentConfig`, `ExperimentResult`, `run_experiment` (runner.py): one experiment, all variants, a run folder;
- `Trace`, `load_trace`, `write_trace`, `TraceRecorder`, `TraceError` (traces.py): the `kvtk.trace/1` JSONL format;
- `few_shot`, `agentic`, `long_document`, `pressure`, `resolve_trace` (workloads.py): seeded generators;
- `oracle_reusable_tokens`, `simulate_cache` (oracle.py): the infinite-tier and Belady bounds;
- `load_run` (results.py): read a run folder back, finished or not.

Layering: this package sits above `toolkit.vllm` (the dry engine drives its harness, the live engine loads its
connector); it never imports vllm at module import time.
"""

from toolkit.experiments.oracle import oracle_reusable_tokens, simulate_cache
from toolkit.experiments.results import RequestRecord, load_run
from toolkit.experiments.runner import PHASES, ExperimentConfig, ExperimentResult, run_experiment
from toolkit.workloads.generators import agentic, few_shot, long_document, pressure
from toolkit.workloads.resolve import resolve_trace
from toolkit.workloads.trace_parser import load_trace
from toolkit.workloads.traces import Trace, TraceError, TraceRecorder, write_trace

__all__ = [
    "PHASES",
    "ExperimentConfig",
    "ExperimentResult",
    "RequestRecord",
    "Trace",
    "TraceError",
    "TraceRecorder",
    "agentic",
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
