"""Workloads: what requests an experiment sends. The `kvtk.trace/1` format (traces.py), the Mooncake release
format (mooncake.py), the seeded generators (generators.py) and the closed-loop client order (clients.py).

Layering: imports only `toolkit.limits`, `toolkit.strict_load` and `toolkit.models` (tokenizer-free facts); no engine,
no torch, no vllm.
"""
