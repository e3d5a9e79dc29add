"""What each phase sends, and the bounds on what it can reuse: the trace's prompts, the pressure traffic sized from the
engine's tiers, and per phase the oracle, the Belady bound and the LRU-sim (no bound) at the hash unit (`oracle.py`)."""

from __future__ import annotations

from functools import partial
from typing import Mapping

import numpy as np

from toolkit.engines.base import LazyPrompt, PhaseRequest
from toolkit.engines.facts import EngineFacts
from toolkit.errors import BadInput
from toolkit.experiments import oracle as orc
from toolkit.experiments.config import ExperimentConfig
from toolkit.workloads.generators import pressure as pressure_trace
from toolkit.workloads.traces import PromptBlocks, Trace, TraceRequest


class TracePrompt(LazyPrompt):
    """A lazy prompt that also names its trace request, so the bounds can key a Mooncake prompt from its block ids
    without making its tokens."""

    __slots__ = ("trace", "request")

    def __init__(self, trace: Trace, request: TraceRequest) -> None:
        super().__init__(partial(trace.prompt_token_ids, request), trace.prompt_len(request))
        self.trace = trace
        self.request = request

    def blocks(self) -> PromptBlocks | None:
        return self.trace.prompt_blocks(self.request)


def phase_prompts(trace: Trace) -> list[PhaseRequest]:
    """One request per trace request; token ids are made when an engine reads them (memory stays bounded)."""
    return [PhaseRequest(r.request_id, TracePrompt(trace, r), r.max_tokens, r.arrival_s) for r in trace.requests]


def keyed(requests: list[PhaseRequest], unit: int, ids: orc.KeyIds | None = None) -> list[tuple[np.ndarray, int]]:
    """Each request's prefix keys at `unit` tokens, as `ids` (dense key ids), and its prompt length."""
    ids = orc.KeyIds() if ids is None else ids
    out = []
    for r in requests:
        prompt = r.prompt_token_ids
        blocks = prompt.blocks() if isinstance(prompt, LazyPrompt) else None
        if blocks is not None:
            out.append((_block_chain_keys(blocks, len(prompt), unit, ids), len(prompt)))
        else:  # list() first: a lazy prompt builds its tokens once per request, not once per slice
            tokens = list(prompt)
            out.append((ids.of(orc.prefix_keys(tokens, unit)), len(tokens)))
    return out


def _block_chain_keys(whole: PromptBlocks, num_tokens: int, unit: int, ids: orc.KeyIds) -> np.ndarray:
    """The prefix keys of a prompt of whole blocks (a Mooncake prompt) from its block ids, its tokens never made:
    the prefix of p tokens is named by the chain of block ids covering it and p's place in its last block, so equal
    keys are equal prefixes.

    The converse (different block ids never give equal tokens) holds with overwhelming probability, as it does
    for the token-hash keys (`oracle.prefix_keys`); `python -m toolkit.bench.bounds_check` compares the two.
    """
    block = whole.block_tokens
    per_block = block // unit + 1  # the places a unit end p in (b * block, (b + 1) * block] can take
    ends = np.arange(1, num_tokens // unit + 1, dtype=np.int64) * unit
    blocks = (ends - 1) // block
    num_blocks = int(blocks[-1]) + 1 if len(ends) else 0
    firsts = np.empty(num_blocks, dtype=np.int64)  # the first id of each block's chain
    node = -1
    for b, block_id in enumerate(whole.block_ids[:num_blocks]):
        node = ids.reserve_for(("blocks", *whole.tokens_key, node, block_id), per_block)
        firsts[b] = node
    return firsts[blocks] + (ends - blocks * block) // unit


def pressure_requests(
    config: ExperimentConfig, desc: EngineFacts, footprint_blocks: int, trace: Trace
) -> list[PhaseRequest]:
    """Unrelated prompts that evict the device cache and `pressure_evict_fraction` of the trace's CPU footprint."""
    sched = desc.scheduler_block_tokens
    per = desc.blocks_per_scheduler_block
    free_blocks = max(0, (desc.cpu_blocks or 0) - footprint_blocks)
    cpu_blocks = free_blocks + int(config.workload.pressure_evict_fraction * footprint_blocks)
    tokens = max(int((desc.device_tokens or 0) * 1.2), cpu_blocks // per * sched)
    prompt = config.workload.pressure_prompt_tokens or max(trace.prompt_len(r) for r in trace.requests)
    num = max(1, -(-tokens // prompt))
    t = pressure_trace(num_requests=num, prompt_tokens=prompt, seed=config.workload.seed, vocab_size=trace.vocab_size)
    return phase_prompts(t)


def phase_sequence(
    config: ExperimentConfig, original: list[PhaseRequest], desc: EngineFacts, trace: Trace
) -> dict[str, list[PhaseRequest]]:
    """Each configured phase's requests: the trace's (`original`), or for pressure the traffic sized from `desc`."""
    seq: dict[str, list[PhaseRequest]] = {}
    for phase in config.workload.phases:
        if phase == "pressure":
            if desc.cpu_blocks is None or desc.device_tokens is None:
                raise BadInput(
                    "phases: pressure needs the CPU tier's and device cache's size; this server does "
                    "not report them (no vllm:kvtk_tier_geometry: not the toolkit's connector); "
                    "drop pressure from --phases"
                )
            keys = [k for k, _ in keyed(original, desc.scheduler_block_tokens)]
            distinct = len(np.unique(np.concatenate(keys))) if keys else 0
            seq[phase] = pressure_requests(config, desc, distinct * desc.blocks_per_scheduler_block, trace)
        else:
            seq[phase] = original
    return seq


def request_bounds(
    config: ExperimentConfig, sequence: Mapping[str, list[PhaseRequest]], desc: EngineFacts
) -> dict[str, orc.PhaseBounds]:
    """Per request the oracle, per phase the Belady bound and the LRU-sim: all at the hash unit, where hits end
    (fine-grained hits inside a scheduler block); Belady for the device cache and the CPU tier together
    (`oracle.bound_capacity_tokens`), so no phase's device plus CPU-tier hits exceed it (`oracle.py`)."""
    unit = desc.hash_block_tokens
    ids = orc.KeyIds()
    keys: dict[str, list[tuple[np.ndarray, int]]] = {}
    by_list: dict[int, list[tuple[np.ndarray, int]]] = {}  # cold, hot and replay send the same list: key it once
    for phase in config.workload.phases:
        # A lazy prompt's tokens are built, keyed and dropped; the keys serve the oracle and the simulations.
        requests = sequence[phase]
        if id(requests) not in by_list:  # `sequence` keeps every list alive, so ids are not reused meanwhile
            by_list[id(requests)] = keyed(requests, unit, ids)
        keys[phase] = by_list[id(requests)]
    seen = np.zeros(ids.count, dtype=bool)
    oracle = {phase: tuple(orc.dense_oracle_tokens(keys[phase], unit, seen)) for phase in config.workload.phases}
    if desc.cpu_blocks is None:  # a server without the toolkit's connector: tier size unknown
        return {phase: orc.PhaseBounds(oracle[phase]) for phase in config.workload.phases}
    capacity, lru_capacity = orc.bound_capacity_tokens(desc), orc.tier_capacity_tokens(desc)
    hits = orc.phase_hits(config.workload.phases, keys, ids.count, unit, capacity, lru_capacity)
    return {
        phase: orc.PhaseBounds(oracle[phase], sum(hits[phase]["belady"]), sum(hits[phase]["lru"]))
        for phase in config.workload.phases
    }
