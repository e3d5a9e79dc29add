"""`toolkit.engines.server.ServerEngine` against a stand-in OpenAI server on 127.0.0.1 (no vLLM):
streamed token ids and logprobs, cached tokens from usage, TTFT, a session turn sent after its previous turn,
the geometry from the connector's gauges, the CPU-tier tokens per request (one at a time) and per phase
(concurrent) from /metrics deltas, the start-up reset that empties the CPU tier, resets retried while refused.
The real server is in test_replay_server.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolkit.engines.base import PhaseRequest, ResetRefused, VariantSpec
from toolkit.engines.server import ServerEngine


class FakeServer(BaseHTTPRequestHandler):
    state: dict = {}

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, content_type="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._send(b"")
        elif self.path == "/v1/models":
            self._send(json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}).encode())
        elif self.path == "/metrics":
            st = self.state
            facts = {
                "hash_block_tokens": 128,
                "scheduler_block_tokens": 640,
                "blocks_per_scheduler_block": 8,
                "cpu_blocks": 800,
                "cpu_block_bytes": 4096,
                "device_blocks": 64,
            }
            lines = [
                f'vllm:kvtk_external_hit_tokens_total{{engine="0"}} {st["hits"]}',
                f'vllm:external_prefix_cache_hits_total{{engine="0"}} {st["hits"]}',
                f'vllm:prefix_cache_hits_total{{engine="0"}} {st["local"]}',
                'vllm:cache_config_info{block_size="640",engine="0",num_gpu_blocks="64"} 1.0',
            ]
            if st["geometry"]:
                lines += [f'vllm:kvtk_tier_geometry{{engine="0",fact="{k}"}} {v}' for k, v in facts.items()]
            self._send(("\n".join(lines) + "\n").encode(), "text/plain")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.startswith("/reset_prefix_cache"):
            if "reset_external=true" in self.path:
                self.state["external_resets"] += 1
                self._send(json.dumps({"success": True}).encode())
                return
            self.state["resets"] += 1
            self._send(json.dumps({"success": self.state["resets"] >= self.state["reset_ok_after"]}).encode())
            return
        prompt = body["prompt"]
        if not body.get("stream"):  # the geometry probe: the connector reports its gauges with its first stats
            self.state["geometry"] = True
            self._send(
                json.dumps(
                    {
                        "choices": [{"logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-1.0]}}],
                        "usage": {"prompt_tokens": len(prompt)},
                    }
                ).encode()
            )
            return
        self.state["order"].append(prompt[0])
        cached = 128 if self.state["warm"] else 0
        self.state["hits"] += cached
        events = [
            {"choices": [{"logprobs": {"tokens": [f"token_id:{prompt[0] + i}"], "token_logprobs": [-0.5]}}]}
            for i in range(body["max_tokens"])
        ]
        events.append(
            {"choices": [], "usage": {"prompt_tokens": len(prompt), "prompt_tokens_details": {"cached_tokens": cached}}}
        )
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(text.encode(), "text/event-stream")


@pytest.fixture
def server():
    FakeServer.state = {
        "hits": 0,
        "local": 0,
        "resets": 0,
        "external_resets": 0,
        "reset_ok_after": 2,
        "warm": False,
        "order": [],
        "geometry": False,
    }
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", FakeServer.state
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_phase_records_metrics_and_reset(server):
    url, state = server
    engine = ServerEngine(VariantSpec(name="toolkit"), url=url)
    assert state["external_resets"] == 1 and state["resets"] == 0  # caches emptied at start: cold is cold
    desc = engine.describe()
    assert desc.model == "fake" and desc.max_model_len == 4096 and desc.geometry_source == "kvtk_tier_geometry"
    assert (desc.hash_block_tokens, desc.scheduler_block_tokens, desc.cpu_blocks) == (128, 640, 800)
    assert desc.device_tokens == 64 // 8 * 640 and desc.cpu_bytes == 800 * 4096
    requests = [PhaseRequest(f"r{i}", [10 * i + 1] + [7] * 199, max_tokens=3) for i in range(4)]
    cold = engine.run_phase("cold", requests, concurrency=2, after={"r3": "r0"})
    assert [r.output_token_ids for r in cold] == [[10 * i + 1 + k for k in range(3)] for i in range(4)]
    assert all(r.output_logprobs == [-0.5] * 3 and r.ttft_s is not None and r.e2e_s >= r.ttft_s for r in cold)
    assert state["order"].index(31) > state["order"].index(1)  # r3 after r0
    assert engine.phase_metrics["cold"]["cpu_tier_tokens"] == 0
    engine.reset_device_cache()
    assert state["resets"] == 2  # refused once, retried
    state["warm"] = True
    hot = engine.run_phase("hot", requests)  # one at a time: the split per request from vLLM's counters
    assert [(r.local_hit_tokens, r.external_hit_tokens) for r in hot] == [(0, 128)] * 4
    assert all(r.recomputed_tokens == 72 for r in hot)
    assert engine.phase_metrics["hot"]["cpu_tier_tokens"] == 512 and engine.phase_metrics["hot"]["cached_tokens"] == 512
    assert engine.phase_extra("hot") == {}
    concurrent = engine.run_phase("replay", requests, concurrency=4)  # per phase only
    assert all(r.local_hit_tokens == 128 and r.external_hit_tokens == 0 for r in concurrent)
    assert engine.phase_extra("replay") == {"local_hit_tokens": 0, "external_hit_tokens": 512}
    state["reset_ok_after"] = 10**9
    engine.reset_timeout_s = 0.3
    with pytest.raises(ResetRefused):
        engine.reset_device_cache()


def test_no_server_is_bad_input():
    with pytest.raises(ValueError, match="no healthy vLLM server"):
        ServerEngine(VariantSpec(name="toolkit"), url="http://127.0.0.1:9")


def test_registered_counter_without_samples_reads_zero():
    from toolkit.serve.client import parse_metrics

    text = (
        "# HELP vllm:kvtk_external_hit_tokens Prompt tokens served from the CPU tier\n"
        "# TYPE vllm:kvtk_external_hit_tokens counter\n"
        "# TYPE vllm:kvtk_cpu_used_blocks gauge\n"
        'vllm:kvtk_cpu_used_blocks{group="0"} 3.0\nvllm:kvtk_cpu_used_blocks{group="1"} 4.0\n'
        "vllm:prompt_tokens_total 10.0\n"
    )
    values = parse_metrics(text, "vllm:kvtk_")
    assert values["vllm:kvtk_external_hit_tokens_total"] == 0.0 and values["vllm:kvtk_cpu_used_blocks"] == 7.0
    assert values['vllm:kvtk_cpu_used_blocks{group="1"}'] == 4.0 and "vllm:prompt_tokens_total" not in values
