"""Helpers shared by the vLLM tests (a uniquely named module: `conftest` names collide across test folders)."""

from __future__ import annotations

import random


def vllm_release() -> tuple[int, ...]:
    """The installed vLLM's (major, minor, patch): the version matrix runs these tests on each supported build."""
    from toolkit.vllm.version import installed_distribution, release_tuple

    found = installed_distribution()
    return release_tuple(found[1]) if found else ()


def simplecpu_is_inclusive() -> bool:
    """vLLM 0.34's SimpleCPU refreshes the CPU copy of a device-local prefix (the rule the toolkit keeps on every
    version, `toolkit.core.lookup.local_refresh`); earlier releases' SimpleCPU does not."""
    return vllm_release()[:2] >= (0, 34)


def cpu_vllm_config():
    """An empty `VllmConfig` on the CPU device, as vLLM's own unit tests build one (official CUDA wheels on a machine
    without a GPU detect no platform, and `VllmConfig()` alone fails there)."""
    from vllm.config import DeviceConfig, VllmConfig

    return VllmConfig(device_config=DeviceConfig("cpu"))


def random_prompts(n: int, length: int, *, seed: int = 0, prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = list(prefix or [])
    return [prefix + [rng.randrange(3, 2000) for _ in range(length - len(prefix))] for _ in range(n)]


HYBRID_BLOCK_TOKENS = 640  # the tiny Qwen3-Next's hybrid block with hash unit 128 (3 Mamba groups + attention)


def prompt_cap_tokens(num_gpu_blocks: int) -> int:
    """Longest prompt a pool runs alone: attention blocks beside a state and a checkpoint per Mamba group."""
    attention_blocks = max(1, num_gpu_blocks - 1 - 2 * 3 - 1)
    return min(2400, attention_blocks * HYBRID_BLOCK_TOKENS - 40)


def tight_pool_phases(cap: int):
    """A user's hybrid workload as harness phases, every prompt at most `cap` tokens: few-shot prompts sharing a
    prefix, two multi-turn sessions whose turns extend the previous prompt, unrelated prompts; cold (three waves,
    one per turn) -> device reset -> hot -> pressure -> replay."""
    from toolkit.engines.harness import Phase

    prefix = random_prompts(1, cap * 5 // 8, seed=31)[0]
    fewshot = {
        f"f{i}": p
        for i, p in enumerate(random_prompts(4, cap - 40 * i, seed=32 + i, prefix=prefix)[0] for i in range(4))
    }
    turn_tokens = cap // 4
    sessions = [random_prompts(1, cap, seed=40 + s)[0] for s in range(2)]
    turns = [{f"s{s}t{t}": sessions[s][: turn_tokens * (t + 2)] for s in range(2)} for t in range(3)]
    unrelated = {f"u{i}": p for i, p in enumerate(random_prompts(3, cap - 24 * i, seed=50 + i)[0] for i in range(3))}
    pressure = {f"p{i}": p for i, p in enumerate(random_prompts(6, cap, seed=60 + i)[0] for i in range(6))}

    def copy(prompts: dict, tag: str) -> dict:
        return {f"{tag}-{k}": v for k, v in prompts.items()}

    first = {**fewshot, **turns[0], **unrelated}
    phases = [
        Phase("cold", copy(first, "cold"), max_tokens=3),
        Phase("cold-turn1", copy(turns[1], "cold"), max_tokens=3),
        Phase("cold-turn2", copy(turns[2], "cold"), max_tokens=3),
    ]
    everything = {**first, **turns[1], **turns[2]}
    phases += [
        Phase("hot", copy(everything, "hot"), max_tokens=3, reset_before=True),
        Phase("pressure", copy(pressure, "pressure"), max_tokens=1, reset_before=True),
        Phase("replay", copy(everything, "replay"), max_tokens=3, reset_before=True),
    ]
    return phases
