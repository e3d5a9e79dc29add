"""hybrid-kv-toolkit: CPU-tier KV-cache offload for hybrid LLMs on vLLM.

Layers (imports only point down): `viz`, `experiments` -> `vllm` -> `copy` -> `core`.
`toolkit.core` is pure Python and imports neither torch nor vllm.
"""

__version__ = "0.1.0"
