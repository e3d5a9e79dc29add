"""A small stdlib client for a running vLLM OpenAI-compatible server: completions by token ids, the device-cache
reset, /metrics. Used by the serve tests and experiments; every call has a timeout, nothing retries forever.

Failures are one line each: an HTTP 4xx answer raises `ServerRefused` (a ValueError: the request was bad input) with
the server's own error message from the body; a server that does not answer within the timeout, or streams an
answer that does not end within it, raises `ServerStalled` (a TimeoutError) naming the call and the limit.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import BadInput, RunFailed

DEFAULT_TIMEOUT_S = 60.0
MAX_ERROR_BODY_BYTES = 64 << 10  # an error body is read this far at most (untrusted, maybe endless)
MAX_ERROR_CHARS = 400  # the server's message as shown: one line, this long at most
MAX_EVENT_LINE_BYTES = 1 << 20  # one server-sent event line: far above a token's event, bounds a runaway line


class ServerRefused(OSError, BadInput):
    """HTTP 4xx: the server refused the request (too long for its context, unknown model, bad option). An OSError
    as urllib's HTTPError was (callers that tolerate a failed call still do), and a ValueError: bad input."""


class ServerStalled(TimeoutError, RunFailed):
    """The server did not answer, or did not finish its answer, within the call's time limit."""


def error_message(body: bytes) -> str:
    """The server's error as one line: vLLM's JSON `{"error": {"message": ...}}` (older: `{"message": ...}`,
    FastAPI: `{"detail": ...}`), else the body's text; whitespace collapsed, cut at `MAX_ERROR_CHARS`."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        inner = doc.get("error")
        found = inner.get("message") if isinstance(inner, dict) else inner
        text = str(found or doc.get("message") or doc.get("detail") or text)
    line = " ".join(text.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


def _failure(exc: BaseException, what: str, timeout_s: float) -> BaseException | None:
    """The one-line error for an HTTP error or a timeout of the call `what` ("POST http://.../v1/completions")."""
    if isinstance(exc, urllib.error.HTTPError):
        body = exc.read(MAX_ERROR_BODY_BYTES) if exc.fp is not None else b""
        message = f"{what}: HTTP {exc.code} {exc.reason}: {error_message(body) or '(empty body)'}"
        return ServerRefused(message) if 400 <= exc.code < 500 else OSError(message)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return ServerStalled(f"{what}: no answer within {timeout_s:g} s (the server stopped answering?)")
    return None


@dataclass
class ServerCompletion:
    token_ids: list[int]
    logprobs: list[float]  # the greedy token's logprob per output token
    prompt_tokens: int
    cached_tokens: int  # usage.prompt_tokens_details.cached_tokens: device prefix cache + connector
    e2e_s: float
    # Streamed answers only: each output token's arrival at the client, seconds after the request was sent (tokens
    # that came in one event share its time).
    token_times_s: list[float] = field(default_factory=list)

    def token_gaps_s(self) -> list[float]:
        """The inter-token latencies: the gap before each token after the first (empty when not streamed)."""
        times = self.token_times_s
        return [later - earlier for earlier, later in zip(times, times[1:])]


def _request(
    url: str, *, data: dict | None = None, method: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> bytes:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(
        url,
        data=body,
        method=method or ("POST" if body is not None else "GET"),
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as exc:
        failure = _failure(exc, f"{req.get_method()} {url}", timeout_s)
        if failure is None:
            raise
        raise failure from None


def is_healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    try:
        _request(f"{base_url}/health", timeout_s=timeout_s)
        return True
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def wait_healthy(base_url: str, *, timeout_s: float, alive=lambda: True, poll_s: float = 0.5) -> float:
    """Poll /health until it answers; returns the seconds waited. Raises TimeoutError, or RuntimeError when
    `alive()` turns false (the server process died)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not alive():
            raise RuntimeError(f"server at {base_url} exited before it was healthy")
        if is_healthy(base_url):
            return time.monotonic() - start
        time.sleep(poll_s)
    raise TimeoutError(f"server at {base_url} not healthy after {timeout_s} s")


def served_models(base_url: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The server's /v1/models entries (id, max_model_len, ...)."""
    return json.loads(_request(f"{base_url}/v1/models", timeout_s=timeout_s))["data"]


def served_model(base_url: str, timeout_s: float = 10.0) -> str:
    return served_models(base_url, timeout_s)[0]["id"]


def complete(
    base_url: str, model: str, prompt_token_ids: list[int], *, max_tokens: int = 8, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ServerCompletion:
    """One greedy completion of a token-id prompt (EOS ignored), with token ids and top-1 logprobs."""
    payload = {
        "model": model,
        "prompt": list(prompt_token_ids),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": 1,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
        "stream": False,
    }
    start = time.monotonic()
    answer = json.loads(_request(f"{base_url}/v1/completions", data=payload, timeout_s=timeout_s))
    e2e = time.monotonic() - start
    choice = answer["choices"][0]
    logprobs = choice["logprobs"]
    token_ids = [int(token.removeprefix("token_id:")) for token in logprobs["tokens"]]
    usage = answer.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return ServerCompletion(
        token_ids=token_ids,
        logprobs=[float(x) for x in logprobs["token_logprobs"]],
        prompt_tokens=int(usage.get("prompt_tokens", len(prompt_token_ids))),
        cached_tokens=int(details.get("cached_tokens") or 0),
        e2e_s=e2e,
    )


def reset_prefix_cache(base_url: str, *, timeout_s: float = 30.0, reset_external: bool = False) -> float:
    """POST /reset_prefix_cache until it succeeds (it refuses while the connector still has stores in flight);
    needs VLLM_SERVER_DEV_MODE=1 on the server. Returns the seconds it took; TimeoutError after `timeout_s`."""
    query = "?reset_external=true" if reset_external else ""
    start = time.monotonic()
    while True:
        answer = json.loads(_request(f"{base_url}/reset_prefix_cache{query}", method="POST", timeout_s=10.0) or b"{}")
        if answer.get("success", True):
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"reset_prefix_cache refused for {timeout_s} s (stores still in flight?)")
        time.sleep(0.2)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)$")


def metrics_text(base_url: str, timeout_s: float = 10.0) -> str:
    """The server's /metrics page as it is (Prometheus text format)."""
    return _request(f"{base_url}/metrics", timeout_s=timeout_s).decode()


def metrics(base_url: str, prefix: str = "vllm:", timeout_s: float = 10.0) -> dict[str, float]:
    """/metrics samples whose name starts with `prefix`, summed over label sets: name -> value, plus
    `name{labels}` -> value for every labelled sample."""
    return parse_metrics(metrics_text(base_url, timeout_s), prefix)


def parse_metrics(text: str, prefix: str = "vllm:") -> dict[str, float]:
    """`metrics` on a /metrics text already read. A metric that is registered but has no sample yet (a labelled
    counter before its first increment) is 0: its `# TYPE` line names it (counters as `name_total`)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4 and parts[2].startswith(prefix):
                name = parts[2] + ("_total" if parts[3] == "counter" and not parts[2].endswith("_total") else "")
                values.setdefault(name, 0.0)
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or not match.group(1).startswith(prefix):
            continue
        name, labels, value = match.group(1), match.group(2), float(match.group(3))
        values[name] = values.get(name, 0.0) + value
        if labels:
            values[name + labels] = value
    return values


LOCAL_HITS_METRIC = "vllm:prefix_cache_hits_total"  # prompt tokens from the device prefix cache
EXTERNAL_HITS_METRIC = "vllm:external_prefix_cache_hits_total"  # from the connector, any connector


def prefix_hit_counters(base_url: str, timeout_s: float = 10.0) -> tuple[float, float]:
    """vLLM's own (device, connector) prefix-cache hit token counters: updated with every engine step's outputs,
    not every connector stats interval, so deltas around one request are that request's hits."""
    values = metrics(base_url, "vllm:", timeout_s=timeout_s)
    return values.get(LOCAL_HITS_METRIC, 0.0), values.get(EXTERNAL_HITS_METRIC, 0.0)


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


def stream_complete(
    base_url: str, model: str, prompt_token_ids: list[int], *, max_tokens: int = 8, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[ServerCompletion, float | None]:
    """`complete` streamed (server-sent events), so the time to the first token is measured at the client:
    returns (the completion, TTFT in seconds or None when no token came). Usage comes in the last event."""
    payload = {
        "model": model,
        "prompt": list(prompt_token_ids),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": 1,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{base_url}/v1/completions",
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    what = f"POST {base_url}/v1/completions ({len(prompt_token_ids)} prompt tokens)"
    stream = _Stream(start)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as response:
            while raw := response.readline(MAX_EVENT_LINE_BYTES):
                if time.monotonic() - start > timeout_s:  # each read is bounded; the whole answer is too
                    raise ServerStalled(
                        f"{what}: answer not finished within {timeout_s:g} s ({len(stream.token_ids)} of "
                        f"{max_tokens} tokens came; the server answers too slowly)"
                    )
                if stream.feed(raw.decode().strip()):
                    break
    except ServerStalled:
        raise
    except (urllib.error.URLError, OSError) as exc:
        failure = _failure(exc, what, timeout_s)
        if failure is None:
            raise
        raise failure from None
    details = stream.usage.get("prompt_tokens_details") or {}
    completion = ServerCompletion(
        token_ids=stream.token_ids,
        logprobs=stream.logprobs,
        prompt_tokens=int(stream.usage.get("prompt_tokens", len(prompt_token_ids))),
        cached_tokens=int(details.get("cached_tokens") or 0),
        e2e_s=time.monotonic() - start,
        token_times_s=stream.token_times_s,
    )
    return completion, stream.ttft


class _Stream:
    """What a streamed completion's server-sent events add up to: tokens, logprobs, usage, each token's arrival."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.usage: dict = {}
        self.ttft: float | None = None
        self.token_times_s: list[float] = []

    def feed(self, line: str) -> bool:
        """One line of the stream; True at its end (`data: [DONE]`)."""
        if not line.startswith("data:"):
            return False
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return True
        event = json.loads(data)
        self.usage = event.get("usage") or self.usage
        for choice in event.get("choices") or ():
            chunk = choice.get("logprobs") or {}
            tokens = chunk.get("tokens") or []
            arrived_s = time.monotonic() - self.start
            if tokens and self.ttft is None:
                self.ttft = arrived_s
            self.token_times_s.extend(arrived_s for _ in tokens)
            self.token_ids.extend(int(t.removeprefix("token_id:")) for t in tokens)
            self.logprobs.extend(float(x) for x in chunk.get("token_logprobs") or [])
        return False
