"""The `server` engine: experiments against any running vLLM OpenAI-compatible server, over HTTP only.

    engine = ServerEngine(spec, url="http://127.0.0.1:8000")

The server's connector and engine options are whatever it was started with (`kvtk serve`, `vllm serve`, another
host's server): one engine is one variant, named by `spec`. Per request: cached prompt tokens from
`usage.prompt_tokens_details.cached_tokens` (device prefix cache and CPU tier together: the server does not split
them per request, so a record's `local_hit_tokens` holds them and `external_hit_tokens` is 0), TTFT and e2e
measured at the client (streamed), greedy output tokens and top-1 logprobs (for identity against cold). Per phase
(`phase_metrics[phase]`): the CPU-tier tokens as the delta of `vllm:kvtk_external_hit_tokens_total` (the
toolkit's connector) over the phase, and their share of the phase's prompt tokens. Resets go through
`POST /reset_prefix_cache` (the server needs VLLM_SERVER_DEV_MODE=1), retried while stores are in flight.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from threading import Event
from typing import Any, Mapping

from toolkit.experiments.engine import PhaseRequest, ResetRefused, VariantSpec, make_record
from toolkit.experiments.results import RequestRecord
from toolkit.serve import client

CPU_TIER_METRIC = "vllm:kvtk_external_hit_tokens_total"
METRICS_SETTLE_S = 3.0  # the engine core reports connector stats at most every stats_interval_s (1 s)


class ServerEngine:
    def __init__(self, spec: VariantSpec, *, url: str, model: str | None = None, timeout_s: float = 120.0,
                 reset_timeout_s: float = 30.0) -> None:
        self.spec = spec
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.reset_timeout_s = reset_timeout_s
        if not client.is_healthy(self.url, timeout_s=10.0):
            raise ValueError(f"url: no healthy vLLM server at {self.url} (GET /health failed)")
        self._models = json.loads(client._request(f"{self.url}/v1/models", timeout_s=10.0))["data"]
        self.model = model or self._models[0]["id"]
        self.phase_metrics: dict[str, dict[str, Any]] = {}

    def describe(self) -> dict[str, Any]:
        entry = next((m for m in self._models if m["id"] == self.model), {})
        return {"engine": "server", "url": self.url, "model": self.model, "variant": self.spec.describe(),
                "max_model_len": entry.get("max_model_len"),
                # Not exposed over HTTP: the server's geometry (read `kvtk geometry` for the model it runs).
                "hash_block_tokens": None, "scheduler_block_tokens": None, "device_blocks": None,
                "cpu_blocks": None}

    def run_phase(self, phase: str, requests: list[PhaseRequest], *, progress: bool = False,
                  concurrency: int | None = None, after: Mapping[str, str] | None = None) -> list[RequestRecord]:
        """Requests one at a time, or up to `concurrency` in flight (a request named in `after` is sent only after
        the request it maps to finished: a session's previous turn)."""
        before = self._cpu_tier_tokens()
        done = {req.request_id: Event() for req in requests}
        after = dict(after or {})

        def send(req: PhaseRequest) -> RequestRecord:
            previous = after.get(req.request_id)
            try:
                if previous in done:
                    done[previous].wait(timeout=self.timeout_s)
                completion, ttft = client.stream_complete(self.url, self.model, list(req.prompt_token_ids),
                                                          max_tokens=req.max_tokens, timeout_s=self.timeout_s)
            finally:
                done[req.request_id].set()
            return make_record(self.spec.name, phase, req.request_id, len(req.prompt_token_ids),
                               completion.cached_tokens, 0, ttft_s=ttft, e2e_s=completion.e2e_s,
                               output_token_ids=completion.token_ids, output_logprobs=completion.logprobs)

        # FIFO pool: the earliest unfinished request is always running, so waiting on an earlier turn cannot deadlock.
        with ThreadPoolExecutor(max(1, concurrency or 1)) as pool:
            records = list(pool.map(send, requests))
        cpu_tier = self._settled_delta(before)
        prompt_tokens = sum(r.prompt_tokens for r in records)
        self.phase_metrics[phase] = {
            "cpu_tier_tokens": cpu_tier, "cached_tokens": sum(r.local_hit_tokens for r in records),
            "prompt_tokens": prompt_tokens,
            "cpu_tier_share": (cpu_tier / prompt_tokens) if cpu_tier is not None and prompt_tokens else None}
        return records

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

    def reset_device_cache(self) -> None:
        try:
            client.reset_prefix_cache(self.url, timeout_s=self.reset_timeout_s)
        except TimeoutError as exc:
            raise ResetRefused(f"{self.spec.name}: {exc}; the hot phase would measure device-local hits") from None
        except OSError as exc:
            raise ResetRefused(f"{self.spec.name}: POST /reset_prefix_cache failed ({exc}); start the server with "
                               "VLLM_SERVER_DEV_MODE=1") from None

    def close(self) -> None:
        return  # the server is not ours to stop
