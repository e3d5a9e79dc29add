"""The real vLLM engine in one process with a connector: start, generate greedily, drain, reset, compare.

In-process mode (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) puts the scheduler and the worker in this process, so both
connector roles are reachable: `scheduler_connector(llm)` and `worker_connector()`. Pitfalls handled here:
`reset_prefix_cache()` refuses while stores are in flight (drain first), and the hash unit (`prefix_match_unit`)
decides whether fine-grained hits exist.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.models.engine_preset import LIVE_SSM_CACHE_DTYPE, live_preset  # noqa: F401 (re-exported)
from toolkit.vllm.transfer_config import kv_transfer_config

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # imported on use below (vLLM must not be imported before `set_live_env`); Any to mypy
    from vllm import LLM

LIVE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


def set_live_env() -> None:
    """Set for the process on purpose, before vLLM is imported: vLLM reads these at import and engine start, and
    the in-process engine must see them for its whole life (setdefault: the user's own values win)."""
    for key, value in LIVE_ENV.items():
        os.environ.setdefault(key, value)


def start_llm(
    model: str,
    *,
    connector: str | None = "toolkit",
    extra: dict[str, Any] | None = None,
    prefix_match_unit: int | None = None,
    max_model_len: int = 4096,
    dtype: str = "auto",
    **kwargs: Any,
) -> LLM:
    """An in-process `vllm.LLM` on the tiny model `model` (weights generated on first use), in the model dtype
    `toolkit.host_cpu.live_model_dtype(dtype)` picks (float32 on CPUs without native bf16)."""
    from toolkit.host_cpu import live_model_dtype
    from toolkit.models import ensure_model, load_entry

    # A bad name, or float32 for a bf16-only architecture, fails before vLLM is imported.
    model_dtype = live_model_dtype(dtype, architecture=load_entry(model).architecture)
    set_live_env()
    from vllm import LLM

    options = dict(
        model=str(ensure_model(model)),
        skip_tokenizer_init=True,
        enforce_eager=True,
        enable_prefix_caching=True,
        dtype=model_dtype,
        max_model_len=max_model_len,
        seed=0,
        disable_log_stats=False,
        mamba_ssm_cache_dtype=LIVE_SSM_CACHE_DTYPE,
    )
    if connector is not None:
        options["kv_transfer_config"] = kv_transfer_config(connector, extra)
    if prefix_match_unit is not None:
        options["prefix_match_unit"] = prefix_match_unit
    options.update(kwargs)
    return LLM(**options)


def model_dtype(llm: LLM) -> str:
    """The dtype the engine's model runs in, as a name ("float32", "bfloat16")."""
    return str(llm.llm_engine.vllm_config.model_config.dtype).removeprefix("torch.")


def engine_core(llm: LLM) -> Any:
    """`toolkit.vllm.adapters.engine_core` (imported on use: vLLM must not be imported before `set_live_env`)."""
    from toolkit.vllm.adapters import engine_core as read_engine_core

    return read_engine_core(llm)


def scheduler_connector(llm: LLM) -> Any:
    """The scheduler-role connector of an in-process engine (the toolkit's, the reference, or None)."""
    return engine_core(llm).scheduler.connector


def worker_connector() -> Any:
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    return get_kv_transfer_group()


def _set_worker_faults(worker: Any, spec: str) -> int:
    """Runs inside each worker (`collective_rpc`): set its connector's fault injection; returns the worker's rank."""
    from toolkit.vllm.worker_side import worker_rank

    worker_connector().set_fault_injection(spec)
    return worker_rank()


def set_fault_injection(llm: LLM, spec: str) -> list[int]:
    """Fault injection on every worker, in-process or in worker processes (tensor parallelism); a spec with
    `rank=R` acts on that rank only. Returns the ranks that were reached."""
    return sorted(llm.collective_rpc(_set_worker_faults, args=(spec,)))


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]  # top-1 (the greedy token's) logprob per output token
    num_cached_tokens: int = 0  # prompt tokens not computed (device prefix cache + connector)


def generate(llm: LLM, prompts: list[list[int]], max_tokens: int = 8) -> list[Completion]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, logprobs=1, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    result = []
    for out in outputs:
        tokens, logprobs = top1_output(out.outputs[0])
        result.append(Completion(tokens, logprobs, int(out.num_cached_tokens or 0)))
    return result


def top1_output(completion: Any) -> tuple[list[int], list[float]]:
    """The output tokens of one vLLM `CompletionOutput` and each one's logprob (requested with `logprobs=1`): what
    every engine and the soak compare."""
    tokens = list(completion.token_ids)
    return tokens, [float(lp[t].logprob) for t, lp in zip(tokens, completion.logprobs or [])]


DEFAULT_DRAIN_TIMEOUT_S = 60.0  # a background copy on a loaded machine can take seconds; empty steps take microseconds
_IDLE_STEP_PAUSE_S = 0.001  # between steps with nothing scheduled: lets the copy threads run instead of spinning


class DrainTimeout(RuntimeError):
    """The connector still had pending work when a drain's time ran out (the message says which)."""


def pending_work(connector: Any) -> dict[str, int]:
    """What the scheduler-side connector still waits for (empty without a toolkit scheduler side)."""
    side = getattr(connector, "scheduler_side", None)
    manager = getattr(side, "manager", None)
    pending: dict[str, int] = manager.pending_work() if manager is not None else {}
    return pending


def drain(llm: LLM, timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S) -> int:
    """Step the engine core while the connector still has pending stores; returns the steps taken.

    Bounded by wall-clock time, not by steps: a step with nothing scheduled only polls the copies, so a step count
    says nothing about how long a store had to finish. Raises `DrainTimeout` naming what was still pending."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s: must be > 0, got {timeout_s}")
    core = engine_core(llm)
    connector = core.scheduler.connector
    steps = 0
    deadline = time.monotonic() + timeout_s
    while connector is not None and connector.has_pending_push_work():
        if time.monotonic() >= deadline:
            raise DrainTimeout(
                f"drain: connector still has pending work after {timeout_s} s ({steps} steps): "
                f"{pending_work(connector)}, {core.scheduler.get_num_unfinished_requests()} "
                "unfinished request(s)"
            )
        if steps and not core.scheduler.get_num_unfinished_requests():
            time.sleep(_IDLE_STEP_PAUSE_S)
        core.step()
        steps += 1
    return steps


def try_reset_device_cache(
    llm: LLM, timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S, retry_s: float = 0.0, *, reset_connector: bool = False
) -> bool:
    """Drain, then reset the device prefix cache (the CPU tier stays unless `reset_connector`); whether vLLM did.
    vLLM may refuse for a moment after a drain (a finish-time store queued by the last step): with `retry_s`, drain
    and step again until it accepts or that much time passed (a bound in time, not steps: an empty step takes
    microseconds)."""
    drain(llm, timeout_s)
    deadline = time.monotonic() + retry_s
    while not llm.reset_prefix_cache(reset_connector=reset_connector):
        if time.monotonic() >= deadline:
            return False
        drain(llm, timeout_s)
        engine_core(llm).step()
        time.sleep(0.001)  # let the copy threads run
    return True


def reset_device_cache(llm: LLM, timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S) -> None:
    """Drain, then reset the device prefix cache (the CPU tier stays); abort loudly if vLLM refuses."""
    if not try_reset_device_cache(llm, timeout_s):
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


def shutdown(llm: LLM) -> None:
    """Release an in-process engine so another can start in the same process."""
    # Best effort, logged once each: an engine that failed mid-run may be half torn down already, and the next
    # engine (or the process's exit) must still get its turn; the run's own error is what the caller reports.
    try:
        engine_core(llm).shutdown()
    except Exception:
        log.debug("shutdown: the engine core did not shut down cleanly", exc_info=True)
    try:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    except Exception:
        log.debug("shutdown: vLLM's distributed state was not cleaned up", exc_info=True)
    del llm
    gc.collect()
