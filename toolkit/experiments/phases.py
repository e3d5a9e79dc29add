"""What each phase sends, and the bounds on what it can reuse: the trace's prompts, the pressure traffic sized from the
engine's tiers, and per phase the oracle, Belady and LRU-sim hit tokens at the hash unit (`oracle.py`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from toolkit.engines.base import LazyPrompt, PhaseRequest
from toolkit.experiments import oracle as orc
from toolkit.workloads.generators import pressure as pressure_trace
from toolkit.workloads.traces import Trace


def phase_prompts(trace: Trace) -> list[PhaseRequest]:
    """One request per trace request; token ids are made when an engine reads them (memory stays bounded)."""
    return [
        PhaseRequest(
            r.request_id, LazyPrompt(partial(trace.prompt_token_ids, r), trace.prompt_len(r)), r.max_tokens, r.arrival_s
        )
        for r in trace.requests
    ]


def keyed(requests: list[PhaseRequest], unit: int) -> list[tuple[list[int], int]]:
    """Each request's prefix keys at `unit` tokens, and its prompt length."""
    # list() first: a lazy prompt builds its tokens once per request, not once per slice.
    return [(orc.prefix_keys(list(r.prompt_token_ids), unit), len(r.prompt_token_ids)) for r in requests]


def pressure_requests(config, desc: dict, footprint_blocks: int, trace: Trace) -> list[PhaseRequest]:
    """Unrelated prompts that evict the device cache and `pressure_evict_fraction` of the trace's CPU footprint."""
    sched = desc["scheduler_block_tokens"]
    per = desc["blocks_per_scheduler_block"]
    free_blocks = max(0, desc["cpu_blocks"] - footprint_blocks)
    cpu_blocks = free_blocks + int(config.pressure_evict_fraction * footprint_blocks)
    tokens = max(int(desc["device_tokens"] * 1.2), cpu_blocks // per * sched)
    prompt = config.pressure_prompt_tokens or max(trace.prompt_len(r) for r in trace.requests)
    num = max(1, -(-tokens // prompt))
    t = pressure_trace(num_requests=num, prompt_tokens=prompt, seed=config.seed, vocab_size=trace.vocab_size)
    return phase_prompts(t)


def phase_sequence(config, original: list[PhaseRequest], desc: dict, trace: Trace) -> dict[str, list[PhaseRequest]]:
    """Each configured phase's requests: the trace's (`original`), or for pressure the traffic sized from `desc`."""
    seq: dict[str, list[PhaseRequest]] = {}
    for phase in config.phases:
        if phase == "pressure":
            if desc.get("cpu_blocks") is None or desc.get("device_tokens") is None:
                raise ValueError(
                    "phases: pressure needs the CPU tier's and device cache's size; this server does "
                    "not report them (no vllm:kvtk_tier_geometry: not the toolkit's connector); "
                    "drop pressure from --phases"
                )
            unit = desc["scheduler_block_tokens"]
            footprint = len({k for keys, _ in keyed(original, unit) for k in keys}) * desc["blocks_per_scheduler_block"]
            seq[phase] = pressure_requests(config, desc, footprint, trace)
        else:
            seq[phase] = original
    return seq


def request_bounds(config, sequence: dict[str, list[PhaseRequest]], desc: dict) -> dict[str, dict[str, Any]]:
    """Per request the oracle, per phase Belady and LRU-sim CPU-tier hit tokens: all at the hash unit, where the
    tier's hits end (fine-grained hits inside a scheduler block), so no achieved hit exceeds its bound."""
    unit = desc["hash_block_tokens"]
    seen: set[int] = set()
    out: dict[str, dict[str, Any]] = {}
    keys: dict[str, list[tuple[list[int], int]]] = {}
    by_list: dict[int, list[tuple[list[int], int]]] = {}  # cold, hot and replay send the same list: key it once
    for phase in config.phases:
        # A lazy prompt's tokens are built, keyed and dropped; the keys serve the oracle and the simulations.
        requests = sequence[phase]
        if id(requests) not in by_list:  # `sequence` keeps every list alive, so ids are not reused meanwhile
            by_list[id(requests)] = keyed(requests, unit)
        keys[phase] = by_list[id(requests)]
        out[phase] = {"oracle_per_request": orc.oracle_reusable_tokens(keys[phase], unit, seen)}
        out[phase]["oracle"] = sum(out[phase]["oracle_per_request"])
    if desc.get("cpu_blocks") is None:  # a server without the toolkit's connector: its tier size is unknown
        sims = {phase: {"belady": None, "lru": None} for phase in config.phases}
    else:
        sims = orc.keyed_phase_bounds(
            config.phases, keys, hash_unit=unit, capacity_tokens=orc.tier_capacity_tokens(desc)
        )
    for phase in config.phases:
        out[phase]["belady"] = sims[phase]["belady"]
        out[phase]["lru"] = sims[phase]["lru"]
    return out
