"""KV hints: the orchestrator's retention actions, parsed (`schema.py`) and applied to the CPU tier (`book.py`).

Pure Python (no vllm): the vLLM adapter (`toolkit/vllm/hints.py`) hands the envelope over as plain builtins.
"""

from toolkit.core.hints.schema import ACTION_VERSION, HintAction, HintKind, ParsedHints, RejectReason, parse_envelope

__all__ = ["ACTION_VERSION", "HintAction", "HintKind", "ParsedHints", "RejectReason", "parse_envelope"]
