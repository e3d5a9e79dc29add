"""The checks of a run's plan that need more than the config's own values, made before the run folder exists: what
reads something (the trace and its sizes, the server's health and context length, the GPU profile's file) and
what needs the model's geometry (the CPU and dry device budgets in blocks). The config's values alone (names,
ranges, caps, combinations) are `ExperimentConfig.validate()`'s, checked before these; nothing here repeats them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit import limits
from toolkit.errors import BadInput
from toolkit.limits import check_trace_sizes
from toolkit.workloads.traces import Trace

if TYPE_CHECKING:
    from toolkit.experiments.config import ExperimentConfig


def check_inputs(config: ExperimentConfig, trace: Trace) -> None:
    """The I/O checks, before the model's facts are built: the trace's sizes, the server's health (a request) and
    context, the live engine's max_model_len against the trace, the GPU profile (a file)."""
    check_trace_sizes(trace)
    url = config.live.url
    if config.engine == "server" and url is not None:  # the config's checks: the server engine has a URL
        from toolkit.serve import client

        if not client.is_healthy(url.rstrip("/"), timeout_s=10.0):
            raise BadInput(f"url: no healthy vLLM server at {url} (GET /health failed)")
        from toolkit.engines.server import check_server_context  # the server's context length, not its HTTP 400

        check_server_context(url, ((r.request_id, trace.prompt_len(r), r.max_tokens) for r in trace.requests))
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


def check_budgets(config: ExperimentConfig, geometry: dict[str, Any]) -> None:
    """The CPU (and dry device) budget in blocks of the model's geometry, at most the caps in `toolkit.limits` (the
    CPU tier's minimum: `capacity.check_cpu_budget`, on the budget the plan settles, given or not)."""
    block_bytes = geometry["cpu_block_bytes"]
    world_size = config.dry.tp if config.engine == "dry" else 1  # the connector splits the budget over the TP ranks
    if config.cpu_gib is not None and block_bytes:
        cpu_bytes = int(config.cpu_gib * 2**30)
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
