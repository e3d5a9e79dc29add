"""Each preset's real context length, for the HF config that stands in for the model in the dry engine.

The dry engine builds vLLM's model config from a tiny model's config.json (`harness.shapes.build_base_config`):
its 8,192 positions made vLLM warn on every long preset run that positions beyond them "lead to nan". The preset's
own context length replaces it (`hf_overrides`), so vLLM derives the model's real limit. No weights run in the dry
engine: the number only sets what vLLM accepts and warns about.

Sources (the `max_position_embeddings` of each model's published config.json, or the context its model card and
vLLM's recipe state where the config carries none):
- qwen3-next-80b-a3b: 262,144 (Qwen/Qwen3-Next-80B-A3B-Instruct config.json)
- qwen3.5-27b, qwen3.5-4b: 262,144 (Qwen/Qwen3.5-* text_config; the family's stated context length)
- gpt-oss-20b: 131,072 (openai/gpt-oss-20b config.json, YaRN-extended from 4,096)
- granite-4.0-h-small: 131,072 (ibm-granite/granite-4.0-h-small config.json)
- jamba-mini-1.5: 262,144 (ai21labs/AI21-Jamba-Mini-1.5 config.json: 256K context)
- kimi-linear-48b-a3b: 1,048,576 (moonshotai/Kimi-Linear-48B-A3B-Instruct: 1M context, vLLM's recipe serves it at
  --max-model-len 1048576)
- nemotron-nano-9b-v2: 131,072 (nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json: 128K context)
"""

from __future__ import annotations

CONTEXT_TOKENS = {
    "qwen3-next-80b-a3b": 262_144,
    "qwen3.5-27b": 262_144,
    "qwen3.5-4b": 262_144,
    "gpt-oss-20b": 131_072,
    "granite-4.0-h-small": 131_072,
    "jamba-mini-1.5": 262_144,
    "kimi-linear-48b-a3b": 1_048_576,
    "nemotron-nano-9b-v2": 131_072,
}


def context_tokens(preset: str) -> int | None:
    """The preset model's context length; None for a name without one (a tiny model keeps its own config)."""
    return CONTEXT_TOKENS.get(preset)


def stand_in_overrides(context: int | None) -> dict[str, int]:
    """vLLM `hf_overrides` for a stand-in config: the real model's context (a layout's `context_tokens`), nothing
    where it has none (a tiny model keeps its own config)."""
    return {"max_position_embeddings": context} if context else {}
