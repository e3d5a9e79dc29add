"""`kvtk serve` the documented way (docs/serving.md): vLLM's OpenAI server, engine core and worker in their own
processes, the toolkit's connector inside. Concurrent cold requests, `/reset_prefix_cache`, a concurrent hot replay
served from the CPU tier (cached tokens per request, and the same total in `vllm:kvtk_external_hit_tokens`),
greedy tokens equal to cold, a request replayed alone bit-identical to its cold run, then SIGTERM: the server,
engine core and worker are gone within the shutdown timeout.

Concurrent replays are compared on tokens with a logprob tolerance: the hot requests are batched differently from
the cold ones (arrival timing over HTTP), and on CPUs with AVX-512-BF16/AMX a different batch moves bf16 logprobs
by ~1e-5..4e-3 (vLLM without a connector does the same); wrong KV moves them by ~0.24 (vllm-on-cpu.md).
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from serve_test_utils import group_alive, terminate

from conftest import SHUTDOWN_TIMEOUT_S
from toolkit.serve import client

pytestmark = pytest.mark.engine

HASH_UNIT = 128
IN_FLIGHT = 8
CONCURRENT_TOLERANCE = 0.05  # far below the ~0.24 of wrong KV


def expected_hit(length: int) -> int:
    """What the CPU tier serves of a prompt replayed after a device reset: every full hash unit but the last token's."""
    return (length - 1) // HASH_UNIT * HASH_UNIT


def test_kvtk_serve_hits_identity_and_graceful_stop(live_settings_server):
    started = time.monotonic()
    rng = random.Random(20)
    prompts = [[rng.randrange(3, 2000) for _ in range(1900 + 60 * i)] for i in range(IN_FLIGHT)]
    solo = [rng.randrange(3, 2000) for _ in range(2100)]
    url, proc, ready_s = live_settings_server  # started the README's way (conftest.py); stopped here
    model = client.served_model(url)
    assert model == "tiny-qwen3-next"

    def run_all(batch):
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            return list(pool.map(lambda p: client.complete(url, model, p, timeout_s=60), batch))

    solo_cold = client.complete(url, model, solo)
    cold = run_all(prompts)
    assert all(c.cached_tokens == 0 for c in cold), [c.cached_tokens for c in cold]
    client.reset_prefix_cache(url)  # retried while the last stores are in flight
    before = client.metrics(url, "vllm:kvtk_")
    hot = run_all(prompts)
    solo_hot = client.complete(url, model, solo)

    assert [h.cached_tokens for h in hot] == [expected_hit(len(p)) for p in prompts]
    assert solo_hot.cached_tokens == expected_hit(len(solo))
    for c, h in zip(cold, hot):
        assert h.token_ids == c.token_ids
        assert max(abs(a - b) for a, b in zip(c.logprobs, h.logprobs)) < CONCURRENT_TOLERANCE
    assert (solo_hot.token_ids, solo_hot.logprobs) == (solo_cold.token_ids, solo_cold.logprobs)

    # The device cache was reset: every cached token came from the CPU tier. Stats reach /metrics at most
    # every stats_interval_s (1 s) and once the last request finished.
    want = sum(h.cached_tokens for h in hot) + solo_hot.cached_tokens
    deadline = time.monotonic() + 10
    while True:
        got = client.delta(client.metrics(url, "vllm:kvtk_"), before).get("vllm:kvtk_external_hit_tokens_total", 0)
        if got >= want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == want

    took = terminate(proc, timeout_s=SHUTDOWN_TIMEOUT_S + 10)
    assert took is not None and took <= SHUTDOWN_TIMEOUT_S, f"SIGTERM to exit: {took} s"
    deadline = time.monotonic() + 5
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(proc.pid), "engine core or worker outlived the API server"
    print(f"ready {ready_s:.1f} s, whole test {time.monotonic() - started:.1f} s, SIGTERM to exit {took:.1f} s")
