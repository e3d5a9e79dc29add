"""What an experiment will run, decided before anything starts: `plan(config) -> Plan`.

A plan holds the resolved trace and its prompts, the variants in run order, the model's facts (layout, block
geometry, step-time model: `capacity.model_facts`, built once for the whole run), the CPU budget and the longest
sequence. Every check that can fail on the inputs runs here, so a bad input is refused before the run folder exists;
`runner.execute(plan)` then starts the engines (`make_engine`) and runs the phases.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any

from toolkit.engines.base import Engine, PhaseRequest, VariantSpec, variants_for, with_hints
from toolkit.errors import BadInput
from toolkit.experiments.capacity import ENGINE_DECIDES, ModelFacts, check_cpu_budget, model_facts
from toolkit.experiments.config import ExperimentConfig
from toolkit.experiments.phases import phase_prompts
from toolkit.experiments.plan_checks import check_budgets, check_inputs
from toolkit.experiments.preflight import dry_geometry_of, dry_preflight, geometry_dict
from toolkit.experiments.run_store import StoreTier
from toolkit.workloads.clients import previous_turns
from toolkit.workloads.hints import eviction_for, sessions_of, synthesise_hints
from toolkit.workloads.resolve import resolve_trace
from toolkit.workloads.traces import Trace


@dataclass(frozen=True)
class Plan:
    config: ExperimentConfig
    trace: Trace
    variants: list[VariantSpec]  # the main variant first; the live negative control (if any) right after it
    facts: ModelFacts
    cpu_bytes: int  # the CPU tier's budget, server-wide
    max_model_len: int  # room for the trace's longest prompt plus its output
    requests: list[PhaseRequest]  # the trace's prompts (cold, hot, replay send them)
    after: dict[str, Any]  # each request's previous turn (`workloads.clients.previous_turns`)
    device: Any = None  # dry: `defaults.DeviceSize`, the device cache per rank and where its size came from
    notices: list[str] = field(default_factory=list)  # one line per pair of variants that cannot differ

    @property
    def has_control(self) -> bool:
        """The live negative control follows the main variant on its engine (`Engine.switch_to`)."""
        return len(self.variants) > 1 and self.variants[1].corrupt_loads


def plan(config: ExperimentConfig) -> Plan:
    c = config
    trace = resolve_trace(c.workload.trace, max_requests=c.workload.max_requests, time_scale=c.workload.time_scale)
    variants = variants_for(
        policy=c.variant.policy,
        fine_grained=c.variant.fine_grained,
        eviction=eviction_for(c.variant.eviction, c.workload.hints),
        baselines=c.variant.baselines,
        connector=c.variant.connector,
    )
    if c.engine == "live" and c.live.negative_control and "hot" in c.workload.phases:
        # Right after the main variant: it reuses that engine and its filled CPU tier (`LiveEngine.switch_to`).
        variants.insert(1, replace(variants[0], name="corrupted_kv", corrupt_loads=True))
    check_inputs(c, trace)  # trace sizes, the server's health, the live max_model_len, the GPU profile
    if c.workload.concurrency and any(r.arrival_s for r in trace.requests):
        raise BadInput(
            f"concurrency: trace {trace.name!r} has arrival times (open loop); closed-loop clients "
            "are for traces without them (drop --concurrency to replay its arrivals)"
        )
    # Before vLLM is imported (the dry engine's tiny hybrid model imports it for its layout): the geometry, the CPU
    # tier against its minimum and caps, the device, every request against it.
    geometry = geometry_dict(dry_geometry_of(c)) if c.engine == "dry" else dict(ENGINE_DECIDES)
    check_budgets(c, geometry)  # in the model's blocks
    cpu_bytes = _cpu_bytes(c, trace, geometry)
    preflight = dry_preflight(c, trace, cpu_bytes) if c.engine == "dry" else None
    for line in preflight.notices if preflight else []:  # every caller's run (replay, sweeps, notebooks) says it
        print(line, file=sys.stderr)
    facts = model_facts(c)
    return Plan(
        config=c,
        trace=trace,
        variants=variants,
        facts=facts,
        cpu_bytes=cpu_bytes,
        max_model_len=max(8192, max(trace.prompt_len(r) + r.max_tokens for r in trace.requests) + 1),
        requests=with_hints(
            phase_prompts(trace), synthesise_hints(trace.requests, sessions_of(trace), c.workload.hints)
        ),
        after=previous_turns(trace),
        device=preflight.device if preflight else None,
        notices=preflight.notices if preflight else [],
    )


def _cpu_bytes(config: ExperimentConfig, trace: Trace, geo: dict[str, Any]) -> int:
    world_size = config.dry.tp if config.engine == "dry" else 1  # the connector splits the budget over the TP ranks
    if config.cpu_gib is not None:
        cpu_bytes = int(config.cpu_gib * 2**30)
    else:
        per_rank = geo.get("fixed_cpu_bytes") or default_cpu_bytes(
            trace, geo["scheduler_block_tokens"], geo["blocks_per_scheduler_block"], geo["cpu_block_bytes"]
        )
        cpu_bytes = per_rank * world_size
    check_cpu_budget(cpu_bytes, geo["cpu_block_bytes"], world_size)
    return cpu_bytes


def default_cpu_bytes(trace: Trace, block_tokens: int, blocks_per_block: int, block_bytes: int) -> int:
    """Twice every prompt block of the trace, per rank: a tier that never evicts."""
    blocks = sum(-(-trace.prompt_len(r) // block_tokens) for r in trace.requests) * blocks_per_block
    return 2 * max(blocks, 1) * block_bytes


def max_num_seqs(config: ExperimentConfig) -> int:
    # N closed-loop clients are N requests the engine may run at once, not a queue in front of max_num_seqs.
    return max(config.max_num_seqs, config.workload.concurrency or 0)


def _disk_options(c: ExperimentConfig) -> dict[str, Any]:
    """The dry engine's disk tier (`--disk-gib`, `--disk-profile`, `--disk-load-rule`) and the shared store below it
    (`--store-gib`, `--store-profile`); none by default."""
    if not c.dry.disk_gib:
        return {}
    from toolkit.experiments.disk_time import hit_costs, staged_reads

    profile, cost = c.dry.disk_profile, c.dry.disk_load_rule == "cost"
    options: dict[str, Any] = {
        "disk_bytes": int(c.dry.disk_gib * 2**30),
        "disk_time": staged_reads(profile),
        "disk_cost": hit_costs(profile) if cost else None,
        "disk_write_policy": c.dry.disk_write_policy,
        "disk_groups": c.dry.disk_groups,
    }
    store_gib = c.live.store_gib
    if store_gib:  # the dry engine's shared store below the disk, read on `--store-profile`'s model
        store_profile = c.dry.store_profile
        options["disk_time"] = staged_reads(profile, store_profile)
        options["shared_store_bytes"] = int(store_gib * 2**30)
        options["shared_store_cost"] = hit_costs(store_profile) if cost else None
    return options


def make_engine(p: Plan, spec: VariantSpec, *, disk_path: str = "", store: StoreTier | None = None) -> Engine:
    """A fresh engine for `spec`: the dry engine on the plan's layout and step-time model, the live engine, or a
    client of the running server (whose own options hold: connector, tier size, blocks; the config names the
    variant only)."""
    c = p.config
    if c.engine == "dry":
        from toolkit.engines.dry import DryEngine

        return DryEngine(
            spec,
            model=c.model,
            cpu_bytes=p.cpu_bytes,
            max_model_len=p.max_model_len,
            num_gpu_blocks=p.device.blocks,
            prefix_match_unit=c.prefix_match_unit,
            max_num_seqs=max_num_seqs(c),
            shape=p.facts.layout,
            window=c.dry.window,
            step_model=p.facts.step_model,
            tp=c.dry.tp,
            dcp=c.dry.dcp,
            dtype=c.dtype,
            device_bytes=p.device.device_bytes,
            speculative=None if c.dry.speculative == "none" else {"method": c.dry.speculative},
            **_disk_options(c),
        )
    if c.engine == "server":
        from toolkit.engines.server import ServerEngine

        assert c.live.url is not None  # the config's checks: the server engine always has its URL
        return ServerEngine(spec, url=c.live.url)
    from toolkit.engines.live import LiveEngine

    return LiveEngine(
        spec,
        model=c.model,
        cpu_bytes=p.cpu_bytes,
        num_gpu_blocks=c.device_blocks,
        prefix_match_unit=c.prefix_match_unit,
        max_num_seqs=max_num_seqs(c),
        dtype=c.dtype,
        # `--disk-gib`: a disk tier storing its blocks in `disk_path` (with `--store`, the store below it); a store
        # alone: the bytes of it the engine indexes.
        disk_bytes=int(c.dry.disk_gib * 2**30) or (store.indexed_bytes if store is not None else 0),
        disk_path=disk_path if c.dry.disk_gib else "",
        disk_write_policy=c.dry.disk_write_policy,
        disk_groups=c.dry.disk_groups,
        store_url=store.url if store is not None else "",
    )
