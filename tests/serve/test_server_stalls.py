"""No silent hang with the server engine: a real loopback HTTP server, started here, that answers /health and
/v1/models but never answers a completion, answers too slowly, or refuses with HTTP 400; and a context length read
before sending. Each failure ends in one line within the time limit, naming the call."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolkit.engines.base import PhaseRequest, VariantSpec
from toolkit.engines.server import ServerEngine, check_server_context
from toolkit.serve.client import ServerRefused, ServerStalled, error_message

LIMIT_S = 1.5


class StallingServer(BaseHTTPRequestHandler):
    mode = "hang"
    max_model_len = 64
    completions = 0
    release = threading.Event()

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(json.dumps({"data": [{"id": "m", "max_model_len": self.max_model_len}]}).encode())
        elif self.path == "/health":
            self._send(b"")
        else:
            self._send(b"", 404)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/reset_prefix_cache"):
            self._send(b'{"success": true}')
            return
        type(self).completions += 1
        if self.mode == "hang":  # accepted, read, never answered
            self.release.wait(60)
        elif self.mode == "slow":  # headers, then a token event every 0.4 s, never the end
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            event = {"choices": [{"logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1]}}]}
            while not self.release.wait(0.4):
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
        else:  # vLLM's error body: a multi-line message in {"error": {...}}
            message = "This model's maximum context length is 64 tokens.\nHowever, you requested 99 tokens."
            self._send(
                json.dumps({"error": {"message": message, "type": "BadRequestError", "code": 400}}).encode(), 400
            )


@pytest.fixture
def server():
    StallingServer.completions = 0
    StallingServer.release = threading.Event()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StallingServer)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    StallingServer.release.set()
    httpd.shutdown()
    httpd.server_close()


def _engine(url: str, mode: str) -> ServerEngine:
    StallingServer.mode = mode
    return ServerEngine(VariantSpec(name="toolkit"), url=url, timeout_s=LIMIT_S, reset_timeout_s=LIMIT_S)


def _requests(count: int, prompt_tokens: int = 8) -> list[PhaseRequest]:
    return [PhaseRequest(f"r{i}", list(range(3, 3 + prompt_tokens)), 4) for i in range(count)]


@pytest.mark.parametrize("mode, words", [("hang", "no answer within"), ("slow", "answers too slowly")])
def test_a_server_that_stops_answering_ends_the_phase(server, mode, words):
    engine = _engine(server, mode)
    start = time.monotonic()
    with pytest.raises(ServerStalled) as info:
        engine.run_phase("cold", _requests(1))
    took = time.monotonic() - start
    assert took < LIMIT_S + 3.0, f"the watchdog took {took:.1f} s for a {LIMIT_S} s limit"
    line = str(info.value)
    assert words in line and "/v1/completions" in line and "\n" not in line


def test_queued_requests_are_not_sent_after_a_stall(server):
    """Four requests, two clients: the phase ends with the first stalls, not after every request timed out."""
    engine = _engine(server, "hang")
    start = time.monotonic()
    with pytest.raises(ServerStalled):
        engine.run_phase("cold", _requests(4), concurrency=2)
    assert time.monotonic() - start < 2 * LIMIT_S + 3.0
    assert StallingServer.completions <= 2


def test_http_400_body_in_one_line(server):
    engine = _engine(server, "refuse")
    with pytest.raises(ServerRefused) as info:
        engine.run_phase("cold", _requests(1))
    line = str(info.value)
    assert "HTTP 400" in line and "maximum context length is 64 tokens. However, you requested 99" in line
    assert "\n" not in line
    assert isinstance(info.value, ValueError)  # bad input: the CLI prints one line and exits 2


def test_too_long_prompt_refused_before_sending(server):
    engine = _engine(server, "refuse")
    with pytest.raises(ValueError, match=r"request r0: 70 prompt \+ 4 output tokens exceed the server's context, "):
        engine.run_phase("cold", _requests(1, prompt_tokens=70))
    assert StallingServer.completions == 0
    with pytest.raises(ValueError, match="max_model_len 64"):
        check_server_context(server, [("a", 60, 4), ("b", 61, 4)])
    check_server_context(server, [("a", 60, 4)])  # 64 tokens fit


def test_error_message_shapes():
    assert error_message(b'{"message": "bad\\n  thing"}') == "bad thing"
    assert error_message(b'{"detail": "Not Found"}') == "Not Found"
    assert error_message(b"plain\ntext") == "plain text"
    assert len(error_message(b"x" * 10_000)) == 400
