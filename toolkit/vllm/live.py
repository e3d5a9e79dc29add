"""The real vLLM engine in one process with a connector: start, generate greedily, drain, reset, compare.

In-process mode (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) puts the scheduler and the worker in this process, so both
connector roles are reachable: `scheduler_connector(llm)` and `worker_connector()`. See
`shared/notes/vllm-on-cpu.md` for the pitfalls handled here: `reset_prefix_cache()` refuses while stores are in
flight (drain first), and the hash unit (`prefix_match_unit`) decides whether fine-grained hits exist.
"""

from __future__ import annotations

import gc
import math
import os
from dataclasses import dataclass

LIVE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


def set_live_env() -> None:
    for key, value in LIVE_ENV.items():
        os.environ.setdefault(key, value)


def connector_config(connector: str, extra: dict | None = None) -> dict:
    from toolkit.vllm.harness import CONNECTORS

    name, module = CONNECTORS[connector]
    return {"kv_connector": name, "kv_connector_module_path": module, "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute", "kv_connector_extra_config": dict(extra or {})}


def start_llm(model: str, *, connector: str | None = "toolkit", extra: dict | None = None,
              prefix_match_unit: int | None = None, max_model_len: int = 4096, **kwargs):
    """An in-process `vllm.LLM` on the tiny model `model` (weights generated on first use)."""
    set_live_env()
    from vllm import LLM

    from toolkit.models import ensure_model

    options = dict(
        model=str(ensure_model(model)), skip_tokenizer_init=True, enforce_eager=True, enable_prefix_caching=True,
        dtype="bfloat16", max_model_len=max_model_len, seed=0, disable_log_stats=False,
        # A float32 recurrent state is lossless at block boundaries, so a state loaded from the CPU tier continues
        # exactly like a recomputed one (a bf16 state is rounded wherever it is written: a hot run resuming at a
        # boundary the cold run passed through in one chunk differs in the last bits). vllm-cpu picks float32 by
        # itself only on AVX-512-BF16 CPUs; naming it keeps block sizes and outputs the same on every CPU.
        mamba_ssm_cache_dtype="float32",
    )
    if connector is not None:
        options["kv_transfer_config"] = connector_config(connector, extra)
    if prefix_match_unit is not None:
        options["prefix_match_unit"] = prefix_match_unit
    options.update(kwargs)
    return LLM(**options)


def engine_core(llm):
    return llm.llm_engine.engine_core.engine_core


def scheduler_connector(llm):
    return engine_core(llm).scheduler.connector


def worker_connector():
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    return get_kv_transfer_group()


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # top-1 (the greedy token's) logprob per output token
    num_cached_tokens: int = 0  # prompt tokens not computed (device prefix cache + connector)


def generate(llm, prompts: list[list[int]], max_tokens: int = 8) -> list[Completion]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, logprobs=1, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    result = []
    for out in outputs:
        comp = out.outputs[0]
        logprobs = [step[tok].logprob for tok, step in zip(comp.token_ids, comp.logprobs)]
        result.append(Completion(list(comp.token_ids), logprobs, int(out.num_cached_tokens or 0)))
    return result


def drain(llm, max_steps: int = 1000) -> int:
    """Step the engine core while the connector still has pending stores; returns the steps taken."""
    core = engine_core(llm)
    connector = core.scheduler.connector
    steps = 0
    while connector is not None and connector.has_pending_push_work():
        core.step()
        steps += 1
        if steps >= max_steps:
            raise RuntimeError(f"drain: connector still has pending stores after {max_steps} steps")
    return steps


def reset_device_cache(llm) -> None:
    """Drain, then reset the device prefix cache (the CPU tier stays); abort loudly if vLLM refuses."""
    drain(llm)
    if not llm.reset_prefix_cache():
        raise RuntimeError("reset_prefix_cache() returned False after draining: a hot phase would be invalid")


def compare(cold: list[Completion], hot: list[Completion]) -> tuple[bool, float]:
    """(greedy tokens and top-1 logprobs bit-identical, max |top-1 logprob delta| over the positions up to and
    including the first token that differs: later positions continue different texts)."""
    identical = True
    delta = 0.0
    for a, b in zip(cold, hot, strict=True):
        if a.token_ids != b.token_ids or a.logprobs != b.logprobs:
            identical = False
        for ta, tb, la, lb in zip(a.token_ids, b.token_ids, a.logprobs, b.logprobs):
            step = abs(la - lb)
            delta = math.inf if step != step else max(delta, step)  # NaN (e.g. from garbage KV) counts as inf
            if ta != tb:
                break
    return identical, delta


def shutdown(llm) -> None:
    """Release an in-process engine so another can start in the same process."""
    try:
        engine_core(llm).shutdown()
    except Exception:
        pass
    try:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    except Exception:
        pass
    del llm
    gc.collect()
