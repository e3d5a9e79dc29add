"""Seeded workload generators (few-shot Q&A, multi-turn agentic, long document, pressure) and trace resolution.

Every generator is a pure function of its parameters: the same call gives the same token ids on every machine.
Token lengths are parameters so one workload shape serves the tiny CPU model (its hybrid block is 1152 tokens, so
shared prefixes must be longer than that to hit) and dry runs with real geometries. Shared text is a *segment*
(drawn from a seed), per-request text is inline, so 10^5-request traces stay small.

`resolve_trace(spec)` accepts a committed trace name (`data/traces/<name>.jsonl`), a path to a `.jsonl` file (the
kvtk format, or the public Mooncake format, told apart by the first line), `mooncake:PATH` (see `mooncake.py`), or
a generator spec `fewshot|agentic|longdoc[:key=value,...]`, e.g. `fewshot:num_requests=10000,prefix_tokens=2000`.
`max_requests` keeps the first N requests and `time_scale` divides every arrival time (2: twice as fast).
A generator spec is checked before anything is drawn (`check_generator_params`): integer counts >= 1, sizes within
`limits.py`'s caps (prompt, output, tokens held in all), finite arrival gaps, a plain `name`.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path

from toolkit import limits
from toolkit.workloads.traces import Trace, TraceRequest, load_trace, segment_tokens

DEFAULT_VOCAB = 2048


def traces_dir() -> Path:
    from toolkit.models.presets import data_dir

    return data_dir() / "traces"


def _add_random_segment(trace: Trace, seg_id: str, seed: int, num_tokens: int) -> str:
    trace.segments[seg_id] = segment_tokens(seed, num_tokens, trace.vocab_size)
    trace.segment_specs[seg_id] = {"random": {"seed": seed, "num_tokens": num_tokens}}
    return seg_id


def _arrival(i: int, interarrival_s: float) -> float:
    return round(i * interarrival_s, 6)


def few_shot(
    *,
    num_requests: int = 16,
    prefix_tokens: int = 2000,
    question_tokens: int = 100,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    interarrival_s: float = 0.0,
    name: str = "",
) -> Trace:
    """The GSM8K 20-shot shape: one long shared few-shot prefix, then a distinct question per request."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"fewshot-{num_requests}", "fewshot", vocab_size, params=params)
    _add_random_segment(trace, "fewshot", seed * 1_000_003 + 1, prefix_tokens)
    questions = segment_tokens(seed * 1_000_003 + 2, num_requests * question_tokens, vocab_size)
    for i in range(num_requests):
        q = tuple(questions[i * question_tokens : (i + 1) * question_tokens])
        trace.requests.append(TraceRequest(f"fs-{i}", _arrival(i, interarrival_s), ("fewshot", q), max_tokens))
    return trace


def agentic(
    *,
    num_sessions: int = 4,
    num_turns: int = 3,
    system_tokens: int = 1200,
    user_tokens: int = 200,
    assistant_tokens: int = 150,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    interarrival_s: float = 0.0,
    name: str = "",
) -> Trace:
    """Multi-turn agentic sessions: turn t's prompt is turn t-1's prompt + its answer + a new user message.

    All sessions share the system prompt (tool definitions); requests arrive turn by turn across sessions.
    """
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"agentic-{num_sessions}x{num_turns}", "agentic", vocab_size, params=params)
    _add_random_segment(trace, "system", seed * 1_000_003 + 1, system_tokens)
    history: list[list[str]] = [["system"] for _ in range(num_sessions)]
    i = 0
    for turn in range(num_turns):
        for s in range(num_sessions):
            base = seed * 1_000_003 + 10 + (s * num_turns + turn) * 2
            if turn > 0:
                history[s].append(_add_random_segment(trace, f"s{s}.a{turn - 1}", base - 1, assistant_tokens))
            history[s].append(_add_random_segment(trace, f"s{s}.u{turn}", base, user_tokens))
            trace.requests.append(
                TraceRequest(f"ag-s{s}-t{turn}", _arrival(i, interarrival_s), tuple(history[s]), max_tokens)
            )
            i += 1
    return trace


def long_document(
    *,
    num_docs: int = 2,
    doc_tokens: int = 3000,
    num_questions: int = 8,
    question_tokens: int = 64,
    max_tokens: int = 4,
    seed: int = 0,
    vocab_size: int = DEFAULT_VOCAB,
    interarrival_s: float = 0.0,
    name: str = "",
) -> Trace:
    """A few long shared documents and many short questions, each about one document (round robin)."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name or f"longdoc-{num_docs}x{num_questions}", "longdoc", vocab_size, params=params)
    for d in range(num_docs):
        _add_random_segment(trace, f"doc{d}", seed * 1_000_003 + 1 + d, doc_tokens)
    questions = segment_tokens(seed * 1_000_003 + 999, num_questions * question_tokens, vocab_size)
    for i in range(num_questions):
        q = tuple(questions[i * question_tokens : (i + 1) * question_tokens])
        trace.requests.append(
            TraceRequest(f"ld-{i}", _arrival(i, interarrival_s), (f"doc{i % num_docs}", q), max_tokens)
        )
    return trace


def pressure(
    *,
    num_requests: int,
    prompt_tokens: int,
    max_tokens: int = 1,
    seed: int = 7,
    vocab_size: int = DEFAULT_VOCAB,
    name: str = "pressure",
) -> Trace:
    """Unrelated traffic (no shared prefix with anything) that evicts from the device cache and the CPU tier."""
    params = {k: v for k, v in locals().items() if k not in ("name",)}
    trace = Trace(name, "pressure", vocab_size, params=params)
    # A distinct stream per request: its first token differs from the others' with overwhelming probability.
    for i in range(num_requests):
        seg = _add_random_segment(trace, f"p{i}", 7_000_000_000 + seed * 1_000_003 + i, prompt_tokens)
        trace.requests.append(TraceRequest(f"pr-{i}", 0.0, (seg,), max_tokens))
    return trace


GENERATORS = {"fewshot": few_shot, "agentic": agentic, "longdoc": long_document}


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _sizes(kind: str, p: dict) -> tuple[int, int, int]:
    """(requests, longest prompt, token ids held) of a generator's trace, from its parameters alone."""
    if kind == "fewshot":
        return (
            p["num_requests"],
            p["prefix_tokens"] + p["question_tokens"],
            p["prefix_tokens"] + p["num_requests"] * p["question_tokens"],
        )
    if kind == "agentic":
        turns, sessions = p["num_turns"], p["num_sessions"]
        longest = p["system_tokens"] + turns * p["user_tokens"] + (turns - 1) * p["assistant_tokens"]
        return (
            sessions * turns,
            longest,
            p["system_tokens"] + sessions * (turns * p["user_tokens"] + (turns - 1) * p["assistant_tokens"]),
        )
    return (
        p["num_questions"],
        p["doc_tokens"] + p["question_tokens"],
        p["num_docs"] * p["doc_tokens"] + p["num_questions"] * p["question_tokens"],
    )


def check_generator_params(kind: str, kwargs: dict) -> None:
    """Types, ranges and the trace's size before it is generated; raises ValueError naming the parameter."""
    fn = GENERATORS[kind]
    params = {n: p.default for n, p in inspect.signature(fn).parameters.items()}
    params.update(kwargs)
    where = f"trace {kind}"
    for name, value in params.items():
        if name == "name":
            if value != "":
                limits.check_name(value, f"{where}: name")
        elif name == "interarrival_s":
            limits.check_float(value, f"{where}: {name}", 0.0, limits.MAX_ARRIVAL_S)
        elif name == "seed":
            limits.check_int(value, f"{where}: {name}", 0, 2**32)
        elif name == "vocab_size":
            limits.check_int(value, f"{where}: {name}", 4, 2**31)
        elif name == "max_tokens":
            limits.check_int(value, f"{where}: {name}", 1, limits.MAX_OUTPUT_TOKENS)
        else:  # counts and token lengths
            cap = limits.MAX_TRACE_REQUESTS if name.startswith("num_") else limits.MAX_PROMPT_TOKENS
            limits.check_int(value, f"{where}: {name}", 1, cap)
    num, longest, held = _sizes(kind, params)
    if num > limits.MAX_TRACE_REQUESTS:
        raise ValueError(f"{where}: {num} requests, more than the limit {limits.MAX_TRACE_REQUESTS}")
    if longest > limits.MAX_PROMPT_TOKENS:
        raise ValueError(f"{where}: prompts of {longest} tokens, more than the limit {limits.MAX_PROMPT_TOKENS}")
    if held > limits.MAX_TRACE_TOKENS:
        raise ValueError(f"{where}: {held} token ids in all, more than the limit {limits.MAX_TRACE_TOKENS}")
    if num * params["interarrival_s"] > limits.MAX_ARRIVAL_S:
        raise ValueError(
            f"{where}: the last arrival ({num} x {params['interarrival_s']} s) is past the limit "
            f"{limits.MAX_ARRIVAL_S:g} s"
        )


def _generator_kwargs(spec: str) -> tuple[str, dict]:
    kind, _, rest = spec.partition(":")
    if kind not in GENERATORS:
        raise ValueError(f"trace: unknown generator {kind!r}; valid generators: {', '.join(GENERATORS)}")
    fn = GENERATORS[kind]
    valid = [p for p in inspect.signature(fn).parameters]
    kwargs = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in valid:
            raise ValueError(f"trace: bad generator parameter {item!r} for {kind}; valid: {', '.join(valid)}")
        if key in kwargs:
            raise ValueError(f"trace: generator parameter {key!r} given twice in {spec!r}")
        kwargs[key] = _parse_value(value)
    check_generator_params(kind, kwargs)
    return kind, kwargs


def generate(spec: str) -> Trace:
    """`fewshot:num_requests=100,prefix_tokens=2000` -> the generated trace (parameters checked first)."""
    kind, kwargs = _generator_kwargs(spec)
    return GENERATORS[kind](**kwargs)


def committed_traces() -> list[str]:
    return sorted(p.stem for p in traces_dir().glob("*.jsonl"))


def resolve_trace(spec: str, *, max_requests: int | None = None, time_scale: float = 1.0) -> Trace:
    """A committed trace name, a `.jsonl` path, `mooncake:PATH` or a generator spec (see the module docstring)."""
    if max_requests is not None and max_requests < 1:
        raise ValueError(f"max_requests: must be >= 1, got {max_requests}")
    if not (limits.is_number(time_scale) and 0 < time_scale < math.inf):
        raise ValueError(f"time_scale: must be a finite number > 0, got {time_scale}")
    trace = _resolve(spec, max_requests, time_scale)
    limits.check_trace_sizes(trace)
    return trace


def check_trace_spec(spec: str) -> None:
    """What `resolve_trace` would refuse without reading or generating anything big: unknown names, missing
    files, bad generator parameters (a sweep checks every cell's trace this way before any cell runs)."""
    kind, _, rest = spec.partition(":")
    if kind == "mooncake":
        if not Path(rest).is_file():
            raise FileNotFoundError(f"trace: no such file {rest!r}")
        return
    if spec.endswith(".jsonl") or Path(spec).is_file():
        if not Path(spec).is_file():
            raise FileNotFoundError(f"trace: no such file {spec!r}")
        return
    if (traces_dir() / f"{spec}.jsonl").is_file():
        return
    if kind in GENERATORS:
        _generator_kwargs(spec)
        return
    _resolve(spec, None, 1.0)  # raises the unknown-trace error


def _resolve(spec: str, max_requests: int | None, time_scale: float) -> Trace:
    from toolkit.workloads.mooncake import load_mooncake, looks_like_mooncake

    if not isinstance(spec, str) or not spec or "\0" in spec:
        raise ValueError(f"trace: expected a trace name, path or generator spec, got {spec!r:.80}")
    kind, _, rest = spec.partition(":")
    if kind == "mooncake":
        return load_mooncake(rest, max_requests=max_requests, time_scale=time_scale)
    path = Path(spec)
    if spec.endswith(".jsonl") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"trace: no such file {spec!r}")
        if looks_like_mooncake(path):
            return load_mooncake(path, max_requests=max_requests, time_scale=time_scale)
        return _subset(load_trace(path), max_requests, time_scale)
    committed = traces_dir() / f"{spec}.jsonl"
    if committed.is_file():
        return _subset(load_trace(committed), max_requests, time_scale)
    if kind in GENERATORS:
        return _subset(generate(spec), max_requests, time_scale)
    raise ValueError(
        f"trace: unknown trace {spec!r}; committed traces: {', '.join(committed_traces()) or '-'}; "
        f"generators: {', '.join(g + '[:key=value,...]' for g in GENERATORS)}; mooncake:PATH; "
        f"or a path to a .jsonl file"
    )


def _subset(trace: Trace, max_requests: int | None, time_scale: float) -> Trace:
    if max_requests is not None:
        trace = trace.head(max_requests)
    if time_scale != 1.0:
        from dataclasses import replace

        trace.requests = [replace(r, arrival_s=r.arrival_s / time_scale) for r in trace.requests]
    return trace
