"""The caps every input is checked against at the edge, before anything is built or created (docs/inputs.md).

A trace, a generator spec, a sweep spec or a command-line value that breaks one of these is refused with one
`ValueError` naming the field and the value; nothing is materialised first, so a one-line trace cannot ask for
gigabytes. The caps are far above what the committed traces and the targets use (10^4 requests of 2000 tokens).
"""

from __future__ import annotations

import math
import re
from typing import Any

from toolkit.errors import BadInput

MAX_PROMPT_TOKENS = 1 << 20  # one prompt (and so one segment)
MAX_OUTPUT_TOKENS = 1 << 17  # one request's output tokens
MAX_MODEL_LEN = MAX_PROMPT_TOKENS + MAX_OUTPUT_TOKENS  # the dry engine's max_model_len at most
MAX_TRACE_TOKENS = 1 << 24  # token ids a trace holds in memory (segments + inline parts), in all
MAX_TRACE_REQUESTS = 1_000_000
MAX_LINE_BYTES = 16 << 20  # one JSONL line (a kvtk line with 2^20 inline token ids fits)
MAX_ARRIVAL_S = 1e9  # about 31 years: arrivals are seconds from the trace start
MAX_SPEC_BYTES = 1 << 20  # a sweep spec file
MAX_NESTING = 64  # JSON / YAML nesting depth
MAX_NAME_CHARS = 128
MAX_CPU_BLOCKS = 1 << 24  # CPU-tier blocks (the pool keeps a few words per block up front)
MAX_DEVICE_BLOCKS = 1 << 21  # dry engine's device blocks (vLLM makes one object per block)
# A memory size in GiB (a tier, a device cache): 1 PiB, far above any block cap, so the size is checked in blocks
# next, and a byte count made from it always fits an integer.
MAX_SIZE_GIB = float(1 << 20)

_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@,-]*")


def check_name(value: Any, field: str) -> str:
    """A name that becomes part of a path: letters, digits and `._+=@,-`, not starting with a dot, no `..`."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_NAME_CHARS
        or not _NAME_OK.fullmatch(value)
        or ".." in value
    ):
        raise BadInput(
            f"{field}: must be a plain name of 1-{MAX_NAME_CHARS} letters, digits and ._+=@,- "
            f"(no path separators, no '..', not starting with '.'), got {value!r:.80}"
        )
    return value


def path_component(text: str) -> str:
    """`text` made safe as one folder name (for default run-folder names built from a trace or spec name)."""
    safe = re.sub(r"[^A-Za-z0-9._+=@,-]", "_", text)[:MAX_NAME_CHARS].lstrip("._+=@,-")
    while ".." in safe:
        safe = safe.replace("..", "_")
    return safe or "unnamed"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(value: Any, field: str, minimum: int, maximum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise BadInput(f"{field}: must be an integer in [{minimum}, {maximum}], got {value!r:.60}")
    return value


def check_float(value: Any, field: str, minimum: float, maximum: float = math.inf, *, min_open: bool = False) -> float:
    """A finite number in [minimum, maximum] ((minimum, maximum] with `min_open`)."""
    ok = (
        is_number(value)
        and math.isfinite(value)
        and value <= maximum
        and (value > minimum if min_open else value >= minimum)
    )
    if not ok:
        low = "(" if min_open else "["
        high = f"{maximum:g}]" if math.isfinite(maximum) else "inf)"
        raise BadInput(f"{field}: must be a finite number in {low}{minimum:g}, {high}, got {value!r:.60}")
    return float(value)


def check_optional_positive(value: Any, field: str, maximum: float = math.inf) -> None:
    if value is not None:
        check_float(value, field, 0.0, maximum, min_open=True)


def check_trace_sizes(trace) -> None:
    """A resolved trace: at least one request, each prompt and output within the caps (and so max_model_len)."""
    if not trace.requests:
        raise BadInput(f"trace {trace.name}: no requests")
    if len(trace.requests) > MAX_TRACE_REQUESTS:
        raise BadInput(f"trace {trace.name}: {len(trace.requests)} requests, more than the limit {MAX_TRACE_REQUESTS}")
    for r in trace.requests:
        prompt = trace.prompt_len(r)
        if prompt > MAX_PROMPT_TOKENS:
            raise BadInput(
                f"trace {trace.name}: request {r.request_id}: prompt of {prompt} tokens, more than "
                f"the limit {MAX_PROMPT_TOKENS}"
            )
        if not 1 <= r.max_tokens <= MAX_OUTPUT_TOKENS:
            raise BadInput(
                f"trace {trace.name}: request {r.request_id}: max_tokens {r.max_tokens} outside "
                f"[1, {MAX_OUTPUT_TOKENS}]"
            )
        if not (math.isfinite(r.arrival_s) and 0 <= r.arrival_s <= MAX_ARRIVAL_S):
            raise BadInput(
                f"trace {trace.name}: request {r.request_id}: arrival_s {r.arrival_s} outside [0, {MAX_ARRIVAL_S:g}]"
            )
