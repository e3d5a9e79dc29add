"""The checks a run's inputs get before its run folder exists, where they need more than the caps of
`toolkit.limits`: the server's health, the live engine's fixed max_model_len, the GPU profile, and the CPU (and dry
device) budget in blocks of the model's geometry."""

from __future__ import annotations

from typing import Any

from toolkit import limits
from toolkit.errors import BadInput
from toolkit.experiments.capacity import check_cpu_budget
from toolkit.limits import check_trace_sizes
from toolkit.workloads.traces import Trace


def check_inputs(config: Any, trace: Trace) -> None:
    """What would otherwise fail after the run folder exists, before the model's facts are built: the trace's
    sizes, the server's health, the live engine's max_model_len, the GPU profile."""
    check_trace_sizes(trace)
    if config.engine == "server":  # refused before the run folder exists, like every other bad input
        from toolkit.serve import client

        if not client.is_healthy(config.live.url.rstrip("/"), timeout_s=10.0):
            raise BadInput(f"url: no healthy vLLM server at {config.live.url} (GET /health failed)")
        from toolkit.engines.server import check_server_context  # the server's context length, not its HTTP 400

        check_server_context(
            config.live.url, ((r.request_id, trace.prompt_len(r), r.max_tokens) for r in trace.requests)
        )
    if config.engine == "live":  # the live engine's max_model_len is fixed (the dry one grows to the trace)
        import inspect

        from toolkit.engines.live import LiveEngine

        most = inspect.signature(LiveEngine).parameters["max_model_len"].default
        for r in trace.requests:
            if trace.prompt_len(r) + r.max_tokens > most:
                raise BadInput(
                    f"trace {trace.name}: request {r.request_id}: {trace.prompt_len(r)} prompt + "
                    f"{r.max_tokens} output tokens exceed the live engine's max_model_len {most}"
                )
    if config.engine == "dry":
        from toolkit.perfmodel.step_time import load_gpu

        load_gpu(config.dry.gpu)


def check_budgets(config: Any, geometry: dict[str, Any]) -> None:
    """The CPU (and dry device) budget in blocks of the model's geometry: at least the one minimum
    (`core.geometry.min_cpu_tier_bytes`), at most the caps in `toolkit.limits`."""
    block_bytes = geometry["cpu_block_bytes"]
    world_size = config.dry.tp if config.engine == "dry" else 1  # the connector splits the budget over the TP ranks
    if config.cpu_gib is not None and block_bytes:
        cpu_bytes = int(config.cpu_gib * 2**30)
        check_cpu_budget(cpu_bytes, block_bytes, world_size)
        per_rank_blocks = cpu_bytes // world_size // block_bytes
        if per_rank_blocks > limits.MAX_CPU_BLOCKS:
            raise BadInput(
                f"cpu_gib: {config.cpu_gib} GiB is {per_rank_blocks} blocks of {block_bytes} bytes per rank, more "
                f"than the limit {limits.MAX_CPU_BLOCKS} blocks"
            )
    if config.engine == "dry" and config.dry.device_gib is not None and block_bytes:
        blocks = int(config.dry.device_gib * 2**30) // block_bytes
        if blocks > limits.MAX_DEVICE_BLOCKS:
            raise BadInput(
                f"device_gib: {config.dry.device_gib} GiB is about {blocks} blocks, more than the limit {limits.MAX_DEVICE_BLOCKS}"
            )
