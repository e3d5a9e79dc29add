"""Engines: what runs a phase of requests against one connector variant and reports per-request hits and times.

`base.py` is the interface every engine implements (`Engine`, an abstract class) and the variants; `dry.py` (vLLM's
scheduler, no model), `live.py` (vLLM in process, a tiny model), `server.py` (any running vLLM server over HTTP),
and `harness/` (the scheduler-only driver the dry engine and the scheduler benchmarks share). What the dry and live
engines read the same way: `vllm_layout.py` (the KV cache layout they describe) and `outputs.py` (greedy outputs
and their identity check). vllm is imported only when an engine is built.
"""
