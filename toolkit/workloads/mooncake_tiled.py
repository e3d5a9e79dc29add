"""A longer Mooncake trace from a short one: the trace `copies` times end to end, each copy on its own blocks.

Copy k (0-based) is the trace with every block id shifted by k x (largest id + 1), so copies share no prefix
(each copy reuses only what the original reuses within itself), and every arrival shifted by k x (the last arrival
+ the mean gap between arrivals), so copy k + 1 starts one mean gap after copy k's last request. Request ids
continue the line numbers (`mc-<line>` as if the files were concatenated). Spec: `mooncake-tiled:COPIES:PATH`
(`resolve.py`); the 3,993-request synthetic trace tiled 3 times is the dry engine's 12k-request benchmark
(`kvtk bench dry --trace mooncake-tiled:3:PATH`).
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from pathlib import Path

from toolkit import limits
from toolkit.errors import BadInput
from toolkit.workloads.mooncake import MooncakeRequest, MooncakeTrace, load_mooncake, new_mooncake_trace

MAX_COPIES = 64


def tile_mooncake(trace: MooncakeTrace, copies: int) -> MooncakeTrace:
    """`trace` end to end `copies` times on disjoint block ids (see the module docstring)."""
    if not isinstance(copies, int) or isinstance(copies, bool) or not 1 <= copies <= MAX_COPIES:
        raise BadInput(f"copies: must be an integer in [1, {MAX_COPIES}], got {copies!r:.40}")
    requests = trace.requests
    if len(requests) * copies > limits.MAX_TRACE_REQUESTS:
        raise BadInput(f"copies: {copies} x {len(requests)} requests, more than {limits.MAX_TRACE_REQUESTS}")
    id_span = 1 + max((max(r.hash_ids) for r in requests if isinstance(r, MooncakeRequest) and r.hash_ids), default=0)
    last_s = requests[-1].arrival_s
    time_span = last_s + (last_s / (len(requests) - 1) if len(requests) > 1 else 0.0)
    out = new_mooncake_trace(trace.name, trace.vocab_size, trace.seed, {**trace.params, "tiled_copies": copies})
    for k in range(copies):
        for line, r in enumerate(requests, start=1 + k * len(requests)):
            if k == 0:
                out.requests.append(r)
                continue
            if not isinstance(r, MooncakeRequest):  # only block ids can be shifted onto disjoint blocks
                raise TypeError(f"tile_mooncake: request {r.request_id} has no block ids")
            shifted = array("q", (b + k * id_span for b in r.hash_ids))
            out.requests.append(
                replace(r, request_id=f"mc-{line}", arrival_s=r.arrival_s + k * time_span, hash_ids=shifted)
            )
    return out


def load_tiled(spec_rest: str, *, max_requests: int | None = None, time_scale: float = 1.0) -> MooncakeTrace:
    """`COPIES:PATH` (what follows `mooncake-tiled:` in a trace spec) -> the tiled trace, cut to `max_requests`."""
    count, sep, path = spec_rest.partition(":")
    if not sep or not count.isdigit():
        raise BadInput(f"trace: expected mooncake-tiled:COPIES:PATH, got {spec_rest!r:.80}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"trace: no such file {path!r}")
    copies = int(count)
    base = load_mooncake(path, time_scale=time_scale)
    tiled = tile_mooncake(base, copies)
    return tiled.head(max_requests) if max_requests is not None else tiled
