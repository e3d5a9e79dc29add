"""Per-request records: what every engine reports for one request of one phase (the rows of requests.parquet)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from toolkit.core.manager import OffloadManager
    from toolkit.vllm.observe import RequestObservations

REQUEST_COLUMNS_DOC = {
    "variant": "which configuration served the phase (toolkit, no_offload, simplecpu, ...)",
    "phase": "cold / hot / pressure / replay",
    "request_id": "trace request id",
    "prompt_tokens": "prompt length in tokens",
    "local_hit_tokens": "tokens served by the device prefix cache",
    "external_hit_tokens": "tokens loaded from the CPU tier",
    "recomputed_tokens": "prompt_tokens - local - external (prefill work actually done)",
    "oracle_reusable_tokens": "tokens an infinite cache could have served",
    "hit_boundary_per_group": "per cache group, the tokens of the prompt the CPU tier held at lookup",
    "miss_reason": "why the hit stopped where it did: the connector's last lookup (core MissReason), else "
    "'below_oracle' when hits < oracle without a connector reason, None when nothing was missed",
    "limiting_group_id": "the cache group that stopped the hit (None: a request-level reason or no miss)",
    "group_miss_reasons": "per cache group, why that group's reach stops where it does (None: not limiting)",
    "load_bytes": "bytes copied CPU -> device for this request (loaded blocks x geometry.block_bytes)",
    "store_bytes": "bytes copied device -> CPU for blocks this request's table held (stored blocks x block_bytes)",
    "queue_s": "arrival to the first step that computes or loads the request (dry: virtual clock; live: vLLM's "
    "queued-to-scheduled time)",
    "ttft_s": "time to first token (live: measured; dry: modelled on the virtual clock, see step_time.py)",
    "e2e_s": "end-to-end latency, arrival to the last token (live: measured; dry: modelled)",
    "num_output_tokens": "output tokens the request produced (dry: its modelled decode steps; live, server: the "
    "tokens returned)",
    "itl_s": "inter-token latencies: the gap before each output token after the first, as streamed to the client "
    "(server engine only; empty where an engine sees no per-token times)",
}


@dataclass
class RequestRecord:
    variant: str
    phase: str
    request_id: str
    prompt_tokens: int
    local_hit_tokens: int
    external_hit_tokens: int
    recomputed_tokens: int
    oracle_reusable_tokens: int = 0
    hit_boundary_per_group: list[int] = field(default_factory=list)
    miss_reason: str | None = None
    limiting_group_id: int | None = None
    group_miss_reasons: list[str | None] = field(default_factory=list)
    load_bytes: int = 0
    store_bytes: int = 0
    queue_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    num_output_tokens: int | None = None
    itl_s: list[float] = field(default_factory=list)


def make_record(
    variant: str, phase: str, request_id: str, prompt_tokens: int, local: int, external: int, **extra: Any
) -> RequestRecord:
    if extra.get("output_token_ids") and "num_output_tokens" not in extra:
        extra["num_output_tokens"] = len(extra["output_token_ids"])
    return RequestRecord(
        variant=variant,
        phase=phase,
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        local_hit_tokens=local,
        external_hit_tokens=external,
        recomputed_tokens=prompt_tokens - local - external,
        **extra,
    )


def connector_observations(connector: Any) -> RequestObservations | None:
    """The toolkit connector's per-request lookups, loads and stores from now on (`vllm.observe`); None for any
    other connector (vLLM's SimpleCPU, none), whose rows then come from what vLLM and the harness saw."""
    from toolkit.vllm.connector import HybridOffloadConnector

    return connector.observe_requests() if isinstance(connector, HybridOffloadConnector) else None


def connector_manager(connector: Any) -> OffloadManager | None:
    """The toolkit connector's scheduler-side manager, to subscribe to (`toolkit.core.observer`); None for any
    other connector, or before its block pool is bound."""
    from toolkit.vllm.connector import HybridOffloadConnector

    side = connector.scheduler_side if isinstance(connector, HybridOffloadConnector) else None
    return side.manager if side is not None else None


def with_observations(
    record: RequestRecord,
    seen: Mapping[str, Any],
    harness_bytes: tuple[int, int],
    queue_s: float | None,
    ttft_s: float | None,
    e2e_s: float | None,
) -> RequestRecord:
    """`record` with the connector's observations of it (`connector_observations(...).take`, {} for another
    connector) and its times; without observed bytes, `harness_bytes` (loaded, stored) stand in."""
    load_bytes, store_bytes = harness_bytes
    return replace(
        record,
        load_bytes=seen.get("load_bytes", load_bytes),
        store_bytes=seen.get("store_bytes", store_bytes),
        hit_boundary_per_group=seen.get("hit_boundary_per_group", []),
        miss_reason=seen.get("miss_reason"),
        limiting_group_id=seen.get("limiting_group_id"),
        group_miss_reasons=seen.get("group_miss_reasons", []),
        queue_s=queue_s,
        ttft_s=ttft_s,
        e2e_s=e2e_s,
    )
