"""The `server` engine: experiments against any running vLLM OpenAI-compatible server, over HTTP only.

    engine = ServerEngine(spec, url="http://127.0.0.1:8000")

The server's connector and engine options are whatever it was started with (`kvtk serve`, `vllm serve`, another
host's server): one engine is one variant, named by `spec`. Per request: cached prompt tokens from
`usage.prompt_tokens_details.cached_tokens` (device prefix cache and CPU tier together), TTFT and e2e measured at
the client (streamed), greedy output tokens and top-1 logprobs (for identity against cold). The CPU-tier share comes
from vLLM's own per-step counter `vllm:external_prefix_cache_hits` (any connector, SimpleCPU too): read around each
request when requests go one at a time (exact per request), around the phase under `concurrency` (per phase only:
the records then hold every cached token as local, and `phase_extra` gives the phase's split). The geometry that
sizes pressure traffic and bounds comes from the toolkit connector's `vllm:kvtk_tier_geometry` gauges (else
vLLM's `vllm:cache_config_info`, without a CPU-tier size). Resets go through `POST /reset_prefix_cache` (the server
needs VLLM_SERVER_DEV_MODE=1), retried while stores are in flight; the engine empties the server's device cache
and CPU tier when it starts (`reset_external=true`), so a cold phase is cold.

No silent hang, no late refusal: a request longer than the server's context (`max_model_len` from GET /v1/models)
is refused before anything is sent, with the numbers (`check_context`); every call has a time limit (`timeout_s`
for a whole streamed answer), and a server that stops answering ends the run with `client.ServerStalled`.
"""

from __future__ import annotations

import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from threading import Event
from typing import Any, Callable, Iterable, Mapping

from toolkit.engines.base import Engine, PhaseRequest, ResetRefused, VariantSpec
from toolkit.engines.facts import EngineFacts
from toolkit.engines.records import RequestRecord, make_record
from toolkit.errors import BadInput, RunFailed
from toolkit.serve import client

CPU_TIER_METRIC = "vllm:kvtk_external_hit_tokens_total"
GEOMETRY_METRIC = "vllm:kvtk_tier_geometry"
METRICS_SETTLE_S = 3.0  # the engine core reports connector stats at most every stats_interval_s (1 s)
COUNTER_SYNC_S = 2.0  # a request's prefix-cache stats reach /metrics with its step's outputs: wait at most this
WARM_UP_VOCAB = 1000  # token ids below every model's vocabulary size (the server's is not exposed over HTTP)
GEOMETRY_FACTS = (
    "hash_block_tokens",
    "scheduler_block_tokens",
    "blocks_per_scheduler_block",
    "cpu_blocks",
    "cpu_block_bytes",
    "device_blocks",
)


class ServerEngine(Engine):
    def __init__(
        self,
        spec: VariantSpec,
        *,
        url: str,
        model: str | None = None,
        timeout_s: float = 120.0,
        reset_timeout_s: float = 30.0,
    ) -> None:
        self.spec = spec
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.reset_timeout_s = reset_timeout_s
        if not client.is_healthy(self.url, timeout_s=10.0):
            raise BadInput(f"url: no healthy vLLM server at {self.url} (GET /health failed)")
        self._models = client.served_models(self.url, timeout_s=10.0)
        self.model = model or self._models[0]["id"]
        self.max_model_len = served_max_model_len(self._models, self.model)
        self.phase_metrics: dict[str, dict[str, Any]] = {}
        self._described: EngineFacts | None = None
        # A cold phase must find empty caches: earlier traffic on this server would otherwise hit (device and CPU
        # tier both; the connector's reset empties its tier).
        self._reset(reset_external=True)

    def describe(self) -> EngineFacts:
        if self._described is None:
            self._described = self._read_geometry()
        return self._described

    def _read_geometry(self) -> EngineFacts:
        entry = next((m for m in self._models if m["id"] == self.model), {})
        facts = self._geometry_gauges()
        if not facts:
            # The connector reports its geometry with its first stats: one tiny request makes the engine step.
            client.complete(self.url, self.model, [1], max_tokens=1, timeout_s=self.timeout_s)
            deadline = time.monotonic() + METRICS_SETTLE_S
            while not facts and time.monotonic() < deadline:
                time.sleep(0.3)
                facts = self._geometry_gauges()
        cache = self._cache_config_info()
        sched = facts.get("scheduler_block_tokens") or _int(cache.get("block_size"))
        if sched is None:  # every bound and the pressure phase are sized in scheduler blocks
            raise RunFailed(f"server {self.url}: reports no block size (no kvtk_tier_geometry, no cache_config_info)")
        per_sched = facts.get("blocks_per_scheduler_block") or 1
        device_blocks = facts.get("device_blocks") or _int(cache.get("num_gpu_blocks"))
        cpu_blocks, block_bytes = facts.get("cpu_blocks"), facts.get("cpu_block_bytes")
        return EngineFacts(
            engine="server",
            url=self.url,
            model=self.model,
            variant=self.spec.describe(),
            max_model_len=_int(entry.get("max_model_len")),
            geometry_source="kvtk_tier_geometry" if facts else "cache_config_info",
            hash_block_tokens=facts.get("hash_block_tokens") or _int(cache.get("hash_block_size")) or sched,
            prefix_match_unit=_int(cache.get("prefix_match_unit")),
            scheduler_block_tokens=sched,
            blocks_per_scheduler_block=per_sched,
            device_blocks=device_blocks,
            device_tokens=(device_blocks // per_sched * sched) if device_blocks and sched else None,
            cpu_blocks=cpu_blocks,
            cpu_block_bytes=block_bytes or 0,
            cpu_bytes=cpu_blocks * block_bytes if cpu_blocks and block_bytes else None,
        )

    def _geometry_gauges(self) -> dict[str, int]:
        try:
            values = client.metrics(self.url, GEOMETRY_METRIC)
        except OSError:
            return {}
        facts: dict[str, int] = {}
        for key, value in values.items():
            for fact in GEOMETRY_FACTS:
                if f'fact="{fact}"' in key:
                    facts[fact] = int(value)
        return facts

    def _cache_config_info(self) -> dict[str, str]:
        try:
            text = client.metrics_text(self.url, timeout_s=10.0)
        except OSError:
            return {}
        for line in text.splitlines():
            if line.startswith("vllm:cache_config_info{"):
                return dict(re.findall(r'(\w+)="([^"]*)"', line[line.index("{") : line.rindex("}")]))
        return {}

    def warm_up(self, prompt_tokens: int, *, seed: int = 1234567) -> RequestRecord:
        """One unrelated greedy request of `prompt_tokens` seeded random tokens, then a reset (as the live engine's):
        the cold phase then measures prefill, not the server's first-call costs. Returns its record (phase
        "warmup"), reported apart from the phases."""
        rng = random.Random(seed)
        prompt = [rng.randrange(3, WARM_UP_VOCAB) for _ in range(max(1, prompt_tokens))]
        completion, ttft = client.stream_complete(self.url, self.model, prompt, max_tokens=1, timeout_s=self.timeout_s)
        self.reset_device_cache()
        return make_record(self.spec.name, "warmup", "warmup", len(prompt), 0, 0, ttft_s=ttft, e2e_s=completion.e2e_s)

    def run_phase(
        self,
        phase: str,
        requests: list[PhaseRequest],
        *,
        progress: bool = False,
        concurrency: int | None = None,
        after: Mapping[str, str] | None = None,
    ) -> list[RequestRecord]:
        """Requests one at a time, or up to `concurrency` in flight (a request named in `after` is sent only after
        the request it maps to finished: a session's previous turn)."""
        check_context(
            self.url, self.max_model_len, ((r.request_id, len(r.prompt_token_ids), r.max_tokens) for r in requests)
        )
        before = self._cpu_tier_tokens()
        counters_before = self._prefix_counters()
        done = {req.request_id: Event() for req in requests}
        after = dict(after or {})
        one_at_a_time = (concurrency or 1) == 1

        failed = Event()  # after one failure (a stalled server) no queued request is sent, each to time out in turn

        def send(req: PhaseRequest) -> RequestRecord:
            previous = after.get(req.request_id)
            try:
                if failed.is_set():
                    raise RuntimeError(f"request {req.request_id}: not sent, an earlier request of the phase failed")
                if previous in done:
                    done[previous].wait(timeout=self.timeout_s)
                start = self._prefix_counters() if one_at_a_time else None
                prompt, limit_s = list(req.prompt_token_ids), self.timeout_s
                completion, ttft = client.stream_complete(
                    self.url, self.model, prompt, max_tokens=req.max_tokens, timeout_s=limit_s
                )
                external = self._request_external(start, completion.cached_tokens) if start is not None else 0
            except BaseException:
                failed.set()
                raise
            finally:
                done[req.request_id].set()
            return make_record(
                self.spec.name,
                phase,
                req.request_id,
                len(req.prompt_token_ids),
                completion.cached_tokens - external,
                external,
                ttft_s=ttft,
                e2e_s=completion.e2e_s,
                output_token_ids=completion.token_ids,
                output_logprobs=completion.logprobs,
                itl_s=completion.token_gaps_s(),
            )

        records = _map_in_order(send, requests, workers=max(1, concurrency or 1))
        self.phase_metrics[phase] = self._phase_metrics(records, before, counters_before, per_request=one_at_a_time)
        return records

    def _phase_metrics(
        self,
        records: list[RequestRecord],
        cpu_tier_before: float | None,
        counters_before: tuple[float, float] | None,
        *,
        per_request: bool,
    ) -> dict[str, Any]:
        """The phase's hit totals: the CPU tier's own counter, and vLLM's external hits (summed over the records
        when they were read `per_request`; else the counters' growth over the phase, where they could be read)."""
        cpu_tier = self._settled_delta(cpu_tier_before)
        prompt_tokens = sum(r.prompt_tokens for r in records)
        external = sum(r.external_hit_tokens for r in records)
        if not per_request and counters_before is not None:
            now = self._prefix_counters()
            external = int(now[1] - counters_before[1]) if now is not None else 0
        return {
            "cpu_tier_tokens": cpu_tier,
            "cached_tokens": sum(r.local_hit_tokens + r.external_hit_tokens for r in records),
            "external_hit_tokens": external,
            "prompt_tokens": prompt_tokens,
            "per_request_split": per_request,
            "cpu_tier_share": (cpu_tier / prompt_tokens) if cpu_tier is not None and prompt_tokens else None,
        }

    def phase_extra(self, phase: str) -> dict[str, Any]:
        """The phase row's hit split where the records cannot hold it (concurrent requests: per phase only)."""
        metrics = self.phase_metrics.get(phase, {})
        if metrics.get("per_request_split", True):
            return {}
        return {
            "local_hit_tokens": metrics["cached_tokens"] - metrics["external_hit_tokens"],
            "external_hit_tokens": metrics["external_hit_tokens"],
        }

    def _prefix_counters(self) -> tuple[float, float] | None:
        """vLLM's (local, external) prefix-cache hit token counters."""
        try:
            return client.prefix_hit_counters(self.url)
        except OSError:
            return None

    def _request_external(self, start: tuple[float, float] | None, cached_tokens: int) -> int:
        """The CPU-tier tokens of the request that just finished: vLLM's counters grow by its local and external
        hits with the step that scheduled it; they are read until the two add up to the request's cached tokens."""
        if start is None:
            return 0
        deadline = time.monotonic() + COUNTER_SYNC_S
        while True:
            now = self._prefix_counters()
            if now is None:
                return 0
            local, external = now[0] - start[0], now[1] - start[1]
            if local + external >= cached_tokens or time.monotonic() > deadline:
                return int(min(external, cached_tokens))
            time.sleep(0.05)

    def _cpu_tier_tokens(self) -> float | None:
        try:
            return client.metrics(self.url, "vllm:kvtk_").get(CPU_TIER_METRIC)  # None: not the toolkit's connector
        except OSError:
            return None

    def _settled_delta(self, before: float | None) -> int | None:
        """The CPU-tier counter's growth over a phase, read until it stops moving (bounded)."""
        if before is None:
            return None  # not the toolkit's connector (no vllm:kvtk_* metrics)
        deadline = time.monotonic() + METRICS_SETTLE_S
        last = self._cpu_tier_tokens()
        while time.monotonic() < deadline:
            time.sleep(1.1)
            now = self._cpu_tier_tokens()
            if now == last:
                break
            last = now
        return None if last is None else int(last - before)

    def reset_device_cache(self, *, cpu_tier: bool = False) -> None:
        self._reset(reset_external=cpu_tier)

    def _reset(self, *, reset_external: bool) -> None:
        try:
            client.reset_prefix_cache(self.url, timeout_s=self.reset_timeout_s, reset_external=reset_external)
        except TimeoutError as exc:
            raise ResetRefused(f"{self.spec.name}: {exc}; the hot phase would measure device-local hits") from None
        except OSError as exc:
            raise ResetRefused(
                f"{self.spec.name}: POST /reset_prefix_cache failed ({exc}); start the server with "
                "VLLM_SERVER_DEV_MODE=1"
            ) from None

    def close(self) -> None:
        return  # the server is not ours to stop


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "", "None") else None
    except ValueError:
        return None


def _map_in_order(
    send: Callable[[PhaseRequest], RequestRecord], requests: list[PhaseRequest], *, workers: int
) -> list[RequestRecord]:
    """`send` over `requests` on `workers` threads, results in order; after a failure nothing queued is started.
    FIFO pool: the earliest unfinished request is always running, so waiting on an earlier turn cannot deadlock."""
    pool = ThreadPoolExecutor(workers)
    try:
        return list(pool.map(send, requests))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def served_max_model_len(models: list[dict[str, Any]], model: str) -> int | None:
    """The context length the server reports for `model` on GET /v1/models (vLLM's `max_model_len`), if any."""
    entry = next((m for m in models if m.get("id") == model), None)
    value = (entry or {}).get("max_model_len")
    return value if isinstance(value, int) and value > 0 else None


def check_context(url: str, max_model_len: int | None, requests: Iterable[tuple[str, int, int]]) -> None:
    """Refuse, before anything is sent, the first request (id, prompt tokens, output tokens) the server would
    answer with HTTP 400: more tokens than its `max_model_len` (the server checks prompt plus max_tokens)."""
    if max_model_len is None:
        return  # a server that does not report its context: its own answer decides
    for request_id, prompt_tokens, output_tokens in requests:
        if prompt_tokens + output_tokens > max_model_len:
            raise BadInput(
                f"request {request_id}: {prompt_tokens} prompt + {output_tokens} output tokens exceed the server's "
                f"context, max_model_len {max_model_len} ({url}); start the server with a larger --max-model-len, "
                "or leave the request out (--max-requests)"
            )


def check_server_context(url: str, requests: Iterable[tuple[str, int, int]], *, model: str | None = None) -> None:
    """`check_context` against a running server's reported context length (one GET /v1/models): what a run checks
    before its run folder exists."""
    url = url.rstrip("/")
    models = client.served_models(url, timeout_s=10.0)
    if not models:
        raise BadInput(f"url: the server at {url} serves no model (GET /v1/models is empty)")
    check_context(url, served_max_model_len(models, model or models[0]["id"]), requests)
