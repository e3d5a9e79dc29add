"""Every workload generator, by name: what it makes and one line on what it is for.

A generator is a pure function of its parameters (seeds included) that makes a `Trace`: the same call gives the
same requests on every machine. `TRACE_SPECS` are the ones `resolve_trace` accepts as a spec
(`fewshot:num_requests=100`), each with `sizes`, the trace's (requests, longest prompt, token ids held) from its
parameters alone, so a spec is checked against `limits.py` before anything is drawn. The others are called directly by their users (the soak, the
scheduler benchmarks, the published-run check, the cache-state recorder), named here so there is one place to find
every workload. (The fine-grained map's workloads, `toolkit.viz.map_grid.WORKLOADS`, are specs of these.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from toolkit.workloads import (
    cache_state,
    generators,
    hybrid_prompts,
    mooncake_tiled,
    random_prompts,
    shared_documents,
    soak_traffic,
)
from toolkit.workloads.traces import Trace

# A trace's (requests, longest prompt, token ids held) from the generator's keyword arguments alone.
Sizes = Callable[[Mapping[str, Any]], tuple[int, int, int]]


@dataclass(frozen=True)
class Generator:
    name: str
    make: Callable[..., Trace]  # every generator makes a trace
    makes: str  # which kind of trace
    description: str


@dataclass(frozen=True)
class TraceSpec:
    """A generator a trace spec may name (`fewshot:num_requests=100`): it makes a `Trace` and has a size rule."""

    name: str
    make: Callable[..., Trace]
    sizes: Sizes


GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator(
            "fewshot",
            generators.few_shot,
            "Trace",
            "the GSM8K 20-shot shape: one long shared few-shot prefix, then a distinct question per request",
        ),
        Generator(
            "agentic",
            generators.agentic,
            "Trace",
            "multi-turn sessions over a shared system prompt; each turn's prompt extends the previous one",
        ),
        Generator(
            "longdoc",
            generators.long_document,
            "Trace",
            "a few long shared documents and many short questions, each about one document",
        ),
        Generator(
            "pressure",
            generators.pressure,
            "Trace",
            "unrelated one-off prompts that evict from the device cache and the CPU tier",
        ),
        Generator(
            "mooncake-tiled",
            mooncake_tiled.tile_mooncake,
            "MooncakeTrace",
            "a Mooncake trace end to end N times on disjoint block ids, arrivals shifted (the dry engine's 12k "
            "benchmark: spec mooncake-tiled:3:PATH)",
        ),
        Generator(
            "soak",
            soak_traffic.soak_trace,
            "SoakTrace",
            "the chaos soak's waves: shared prefixes, repeats, one-offs, aborts and prefix-cache resets "
            "(`build_waves` groups the trace by wave)",
        ),
        Generator(
            "scheduler-bench",
            hybrid_prompts.wave_prompts,
            "Trace",
            "the scheduler benchmark's hybrid prompts over a few shared prefixes, one wave (new suffixes each)",
        ),
        Generator(
            "shared-documents",
            shared_documents.shared_document_prompts,
            "Trace",
            "the scheduler benchmark against vLLM: Zipf-popular shared documents, each request one plus a suffix",
        ),
        Generator(
            "random-prompts",
            random_prompts.random_prompts,
            "Trace",
            "unrelated prompts of one length (the published serving runs `bench dry --check-published` replays)",
        ),
        Generator(
            "cache-state",
            cache_state.cache_state_prompts,
            "Trace",
            "the cache-state recorder's prompts over shared segments (grow, repeat, share, fresh); the recorder "
            "sends them by engine step",
        ),
    )
}

# The generators `resolve_trace` accepts as a spec, in the order its messages list them.
TRACE_SPECS: dict[str, TraceSpec] = {
    s.name: s
    for s in (
        TraceSpec("fewshot", generators.few_shot, generators.few_shot_sizes),
        TraceSpec("agentic", generators.agentic, generators.agentic_sizes),
        TraceSpec("longdoc", generators.long_document, generators.long_document_sizes),
    )
}
