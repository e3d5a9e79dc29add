"""The public Mooncake trace format (FAST'25 release), streamed into a `Trace` whose prompts are made on demand.

One JSON object per line (parsed with `json` only), exactly these fields:

    {"timestamp": int|float,     # arrival in milliseconds from the trace start, >= 0, non-decreasing
     "input_length": int,        # prompt tokens, >= 1
     "output_length": int,       # output tokens, >= 1
     "hash_ids": [int, ...]}     # prefix block ids, 512 tokens per block: ceil(input_length / 512) ids, each >= 0

Equal ids name the same tokens. Token ids are derived from the block id alone (token j of block b is a 64-bit
mix of (seed, b * 512 + j)), so requests that share leading block ids share exactly those prefixes and, with
overwhelming probability, nothing else (two different blocks agree on a 16-token hash unit with probability about
vocab^-16); the last block is cut to `input_length`. A request keeps only its block ids (an
`array` of 8-byte ints); its tokens are generated when the engine is fed it, so a trace of 10^5 requests holds its
block ids, not its 10^9 tokens. A bad line raises `TraceError` naming the line number and the field.
Caps (`limits.py`): input_length <= 2^20 tokens (checked before the block ids are read), output_length <= 2^17,
timestamps finite and <= 1e12 ms, a line <= 16 MiB, <= 10^6 requests; duplicate keys and NaN are refused.
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from toolkit import limits
from toolkit.errors import BadInput
from toolkit.strict_load import StrictLoadError, iter_lines
from toolkit.workloads.trace_parser import json_object_line
from toolkit.workloads.traces import FIRST_TOKEN_ID, PromptBlocks, Trace, TraceError, TraceRequest

if TYPE_CHECKING:
    import numpy as np

MOONCAKE_BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
DEFAULT_VOCAB = 2048  # the tiny models' vocabulary; any id in [3, vocab) is a valid prompt token for them
MAX_SHARED_TOKEN_VOCAB = 1 << 18  # up to this vocabulary, prompts share one array of token ints (`_token_objects`)


@dataclass(frozen=True)
class MooncakeRequest(TraceRequest):
    """A Mooncake request: `parts` is empty, the prompt is `hash_ids` expanded and cut to `input_length`."""

    hash_ids: array[int]
    input_length: int


class MooncakeTrace(Trace):
    """A `Trace` whose prompts come from block ids (no segments are stored)."""

    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    seed: int = 0

    def block_token_ids(self, block_id: int) -> list[int]:
        return self._tokens(array("q", [block_id]), self.block_tokens)

    def prompt_token_ids(self, request: TraceRequest) -> list[int]:
        if not isinstance(request, MooncakeRequest):
            return super().prompt_token_ids(request)
        return self._tokens(request.hash_ids, request.input_length)

    def _tokens(self, block_ids: array[int], num_tokens: int) -> list[int]:
        """Token j of block b is a 64-bit mix (splitmix64's finaliser) of (seed, b, j), mapped into [3, vocab).

        Vectorised over the whole prompt: one numpy pass per request instead of one generator per block.
        """
        import numpy as np

        blocks = np.frombuffer(block_ids, dtype=np.int64).astype(np.uint64)
        pos = np.arange(self.block_tokens, dtype=np.uint64)
        with np.errstate(over="ignore"):
            x = (blocks[:, None] * np.uint64(self.block_tokens) + pos[None, :]).ravel()[:num_tokens]
            x = x + np.uint64((self.seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            x = x ^ (x >> np.uint64(31))
        index = (x % np.uint64(self.vocab_size - FIRST_TOKEN_ID)).astype(np.intp)
        if self.vocab_size <= MAX_SHARED_TOKEN_VOCAB:
            # Picking from one array of the token ints: the list shares them (no 10^7 int objects made and freed).
            shared: list[int] = _token_objects(self.vocab_size)[index].tolist()
            return shared
        tokens: list[int] = (index + FIRST_TOKEN_ID).tolist()
        return tokens

    def prompt_block_ids(self, request: TraceRequest) -> array[int] | None:
        """The request's block ids when its prompt is this generator's tokens of them, end to end (token j of
        block b a function of (seed, vocabulary, b, j) alone, the last block cut): then requests whose block ids
        agree up to block k have the same tokens up to there. None for any other request or a subclass that makes
        tokens otherwise. (The dry engine memoises block hashes on this, `engines/dry_hashing.py`.)"""
        cls = type(self)
        if (
            not isinstance(request, MooncakeRequest)
            or cls.prompt_token_ids is not MooncakeTrace.prompt_token_ids
            or cls._tokens is not MooncakeTrace._tokens
        ):
            return None
        return request.hash_ids

    def prompt_blocks(self, request: TraceRequest) -> PromptBlocks | None:
        block_ids = self.prompt_block_ids(request)
        return None if block_ids is None else PromptBlocks(block_ids, self.block_tokens, self.tokens_key())

    def tokens_key(self) -> tuple[int, int, int]:
        """What the block-id-to-tokens function depends on besides the block id: seed, vocabulary, block size."""
        return (self.seed, self.vocab_size, self.block_tokens)

    def prompt_len(self, request: TraceRequest) -> int:
        return request.input_length if isinstance(request, MooncakeRequest) else super().prompt_len(request)

    def head(self, num_requests: int) -> "MooncakeTrace":
        out = new_mooncake_trace(self.name, self.vocab_size, self.seed, dict(self.params))
        out.requests = self.requests[:num_requests]
        return out


@lru_cache(maxsize=4)
def _token_objects(vocab_size: int) -> np.ndarray[tuple[int], np.dtype[np.object_]]:
    """The ints FIRST_TOKEN_ID .. vocab_size - 1 in a numpy object array (indexing it gives lists of shared ints)."""
    import numpy as np

    table = np.empty(vocab_size - FIRST_TOKEN_ID, dtype=object)
    table[:] = range(FIRST_TOKEN_ID, vocab_size)
    return table


def new_mooncake_trace(name: str, vocab_size: int, seed: int, params: dict[str, Any]) -> MooncakeTrace:
    """An empty Mooncake trace whose prompts will come from block ids at `seed` and `vocab_size`."""
    trace = MooncakeTrace(name, "mooncake", vocab_size, params=params)
    trace.seed = seed
    return trace


def _fail(lineno: int, fieldname: str, message: str) -> TraceError:
    return TraceError(f"mooncake line {lineno}: field {fieldname!r}: {message}")


def _count(obj: dict[str, Any], key: str, lineno: int, maximum: int) -> int:
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= maximum:
        raise _fail(lineno, key, f"must be an integer in [1, {maximum}], got {value!r:.60}")
    return value


def parse_mooncake_lines(
    lines: Iterable[str],
    *,
    name: str = "mooncake",
    max_requests: int | None = None,
    time_scale: float = 1.0,
    vocab_size: int = DEFAULT_VOCAB,
    seed: int = 0,
) -> MooncakeTrace:
    """Parse Mooncake lines strictly, stopping after `max_requests`; arrivals are `timestamp / 1000 / time_scale` s.

    `time_scale` > 1 compresses time (2: requests arrive twice as fast). Blank lines are refused like any bad line.
    """
    trace = _empty_trace(name, max_requests, time_scale, vocab_size, seed)
    requests = trace.requests
    last_ms = 0.0
    for lineno, line in enumerate(lines, start=1):
        if max_requests is not None and len(requests) >= max_requests:
            break
        if len(requests) >= limits.MAX_TRACE_REQUESTS:
            raise _fail(lineno, "timestamp", f"more than {limits.MAX_TRACE_REQUESTS} requests")
        obj = json_object_line(line, lineno, label="mooncake")
        last_ms = _append_request(obj, lineno, last_ms, time_scale, requests)
    if not requests:
        raise TraceError(f"mooncake trace {name}: no requests")
    return trace


def _empty_trace(name: str, max_requests: int | None, time_scale: float, vocab_size: int, seed: int) -> MooncakeTrace:
    """The arguments checked, and the trace the lines are parsed into (its params record how it was read)."""
    if max_requests is not None and max_requests < 1:
        raise BadInput(f"max_requests: must be >= 1, got {max_requests}")
    if not (limits.is_number(time_scale) and 0 < time_scale < math.inf):
        raise BadInput(f"time_scale: must be a finite number > 0, got {time_scale}")
    limits.check_name(name, "name")
    if vocab_size <= FIRST_TOKEN_ID:
        raise BadInput(f"vocab_size: must be > {FIRST_TOKEN_ID}, got {vocab_size}")
    params = {
        "format": "mooncake",
        "block_tokens": MOONCAKE_BLOCK_TOKENS,
        "time_scale": time_scale,
        "max_requests": max_requests,
        "seed": seed,
    }
    return new_mooncake_trace(name, vocab_size, seed, params)


def _append_request(
    obj: dict[str, Any], lineno: int, last_ms: float, time_scale: float, requests: list[TraceRequest]
) -> float:
    """Check one line's fields and append its request to `requests`; returns its timestamp (ms)."""
    for key in FIELDS:
        if key not in obj:
            raise _fail(lineno, key, "missing")
    for key in sorted(obj.keys() - set(FIELDS)):
        raise _fail(lineno, key, f"unknown field (valid: {', '.join(FIELDS)})")
    stamp = obj["timestamp"]
    if not limits.is_number(stamp) or not 0 <= stamp <= limits.MAX_ARRIVAL_S * 1000:
        raise _fail(
            lineno,
            "timestamp",
            f"must be a finite number of milliseconds in [0, {limits.MAX_ARRIVAL_S * 1000:g}], got {stamp!r:.60}",
        )
    if stamp < last_ms:
        raise _fail(lineno, "timestamp", f"arrivals must not decrease ({stamp} after {last_ms})")
    input_length = _count(obj, "input_length", lineno, limits.MAX_PROMPT_TOKENS)
    output_length = _count(obj, "output_length", lineno, limits.MAX_OUTPUT_TOKENS)
    ids = obj["hash_ids"]
    if not isinstance(ids, list):
        raise _fail(lineno, "hash_ids", f"must be a list of block ids, got {type(ids).__name__}")
    expected = -(-input_length // MOONCAKE_BLOCK_TOKENS)
    if len(ids) != expected:
        raise _fail(
            lineno,
            "hash_ids",
            f"{len(ids)} ids for input_length {input_length}; a prompt of "
            f"{input_length} tokens has {expected} blocks of {MOONCAKE_BLOCK_TOKENS}",
        )
    for i, block_id in enumerate(ids):
        if not isinstance(block_id, int) or isinstance(block_id, bool) or not 0 <= block_id < 2**63:
            raise _fail(lineno, "hash_ids", f"item {i} must be an integer block id >= 0, got {block_id!r:.60}")
    stamp_ms = float(stamp)
    requests.append(
        MooncakeRequest(
            f"mc-{lineno}", stamp_ms / 1000.0 / time_scale, (), output_length, array("q", ids), input_length
        )
    )
    return stamp_ms


def load_mooncake(path: str | Path, **kwargs: Any) -> MooncakeTrace:
    """Stream a Mooncake JSONL file (see `parse_mooncake_lines` for the keyword arguments)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trace: no such file {str(path)!r}")
    with path.open("rb") as handle:
        try:
            return parse_mooncake_lines(iter_lines(handle, "mooncake"), name=limits.path_component(path.stem), **kwargs)
        except (TraceError, StrictLoadError) as exc:
            raise TraceError(f"{path}: {exc}") from None


def looks_like_mooncake(path: str | Path) -> bool:
    """True when the file's first line is a JSON object with Mooncake's fields (and no kvtk `type`)."""
    with Path(path).open("rb") as handle:
        first = handle.readline(limits.MAX_LINE_BYTES)
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep: the kvtk parser says why
        return False
    return isinstance(obj, dict) and "type" not in obj and {"hash_ids", "input_length"} <= obj.keys()
