"""Workloads: what requests an experiment sends, and every generator of them, named in one registry.

Formats: `kvtk.trace/1` (traces.py) and the public Mooncake release (mooncake.py). Generators, all seeded, each
making a `Trace`, listed by name in `registry.py`: the trace generators (generators.py: fewshot, agentic, longdoc,
pressure), the soak's traffic (soak_traffic.py, grouped into waves by `build_waves`), the scheduler benchmarks'
prompts (hybrid_prompts.py, shared_documents.py), the published runs' prompts (random_prompts.py) and the
cache-state recorder's prompts (cache_state.py). `resolve.py` turns a trace name, path or generator spec into a
checked `Trace`; clients.py is the closed-loop client order.

Layering: imports only `toolkit.core`, `toolkit.models` and the top-level helpers (`limits`, `strict_load`, ...);
no engine, no torch, no vllm.
"""
