"""Trace resolution: a name, a path or a generator spec -> a checked `Trace`.

`resolve_trace(spec)` accepts a committed trace name (`data/traces/<name>.jsonl`), a path to a `.jsonl` file (the
kvtk format, or the public Mooncake format, told apart by the first line), `mooncake:PATH` (see `mooncake.py`),
`mooncake-tiled:COPIES:PATH` (that trace end to end COPIES times on disjoint blocks, `mooncake_tiled.py`), or
a generator spec `fewshot|agentic|longdoc[:key=value,...]`, e.g. `fewshot:num_requests=10000,prefix_tokens=2000`
(the generators named in `toolkit.workloads.registry.TRACE_SPECS`).
`max_requests` keeps the first N requests and `time_scale` divides every arrival time (2: twice as fast).
A generator spec is checked before anything is drawn (`check_generator_params`): integer counts >= 1, sizes within
`limits.py`'s caps (prompt, output, tokens held in all), finite arrival gaps, a plain `name`.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any, Mapping

from toolkit import limits
from toolkit.errors import BadInput
from toolkit.workloads.registry import TRACE_SPECS
from toolkit.workloads.trace_parser import load_trace
from toolkit.workloads.traces import Trace


def traces_dir() -> Path:
    from toolkit.models.presets import data_dir

    return data_dir() / "traces"


def _parse_value(text: str) -> int | float | str:
    for cast in (int, float):
        try:
            value: int | float = cast(text)
        except ValueError:
            continue
        return value
    return text


def check_generator_params(kind: str, kwargs: Mapping[str, object]) -> None:
    """Types, ranges and the trace's size before it is generated; raises ValueError naming the parameter."""
    generator = TRACE_SPECS[kind]
    params: dict[str, Any] = {n: p.default for n, p in inspect.signature(generator.make).parameters.items()}
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
    num, longest, held = generator.sizes(params)
    if num > limits.MAX_TRACE_REQUESTS:
        raise BadInput(f"{where}: {num} requests, more than the limit {limits.MAX_TRACE_REQUESTS}")
    if longest > limits.MAX_PROMPT_TOKENS:
        raise BadInput(f"{where}: prompts of {longest} tokens, more than the limit {limits.MAX_PROMPT_TOKENS}")
    if held > limits.MAX_TRACE_TOKENS:
        raise BadInput(f"{where}: {held} token ids in all, more than the limit {limits.MAX_TRACE_TOKENS}")
    if num * params["interarrival_s"] > limits.MAX_ARRIVAL_S:
        raise BadInput(
            f"{where}: the last arrival ({num} x {params['interarrival_s']} s) is past the limit "
            f"{limits.MAX_ARRIVAL_S:g} s"
        )


def _generator_kwargs(spec: str) -> tuple[str, dict[str, int | float | str]]:
    kind, _, rest = spec.partition(":")
    if kind not in TRACE_SPECS:
        raise BadInput(f"trace: unknown generator {kind!r}; valid generators: {', '.join(TRACE_SPECS)}")
    valid = [p for p in inspect.signature(TRACE_SPECS[kind].make).parameters]
    kwargs: dict[str, int | float | str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in valid:
            raise BadInput(f"trace: bad generator parameter {item!r} for {kind}; valid: {', '.join(valid)}")
        if key in kwargs:
            raise BadInput(f"trace: generator parameter {key!r} given twice in {spec!r}")
        kwargs[key] = _parse_value(value)
    check_generator_params(kind, kwargs)
    return kind, kwargs


def generate(spec: str) -> Trace:
    """`fewshot:num_requests=100,prefix_tokens=2000` -> the generated trace (parameters checked first)."""
    kind, kwargs = _generator_kwargs(spec)
    return TRACE_SPECS[kind].make(**kwargs)


def committed_traces() -> list[str]:
    return sorted(p.stem for p in traces_dir().glob("*.jsonl"))


def resolve_trace(spec: str, *, max_requests: int | None = None, time_scale: float = 1.0) -> Trace:
    """A committed trace name, a `.jsonl` path, `mooncake:PATH` or a generator spec (see the module docstring)."""
    if max_requests is not None and max_requests < 1:
        raise BadInput(f"max_requests: must be >= 1, got {max_requests}")
    if not (limits.is_number(time_scale) and 0 < time_scale < math.inf):
        raise BadInput(f"time_scale: must be a finite number > 0, got {time_scale}")
    trace = _resolve(spec, max_requests, time_scale)
    limits.check_trace_sizes(trace)
    return trace


def check_trace_spec(spec: str) -> None:
    """What `resolve_trace` would refuse without reading or generating anything big: unknown names, missing
    files, bad generator parameters (a sweep checks every cell's trace this way before any cell runs)."""
    kind, _, rest = spec.partition(":")
    if kind in ("mooncake", "mooncake-tiled"):
        path = rest.partition(":")[2] if kind == "mooncake-tiled" else rest
        if not Path(path).is_file():
            raise FileNotFoundError(f"trace: no such file {path!r}")
        return
    if spec.endswith(".jsonl") or Path(spec).is_file():
        if not Path(spec).is_file():
            raise FileNotFoundError(f"trace: no such file {spec!r}")
        return
    if (traces_dir() / f"{spec}.jsonl").is_file():
        return
    if kind in TRACE_SPECS:
        _generator_kwargs(spec)
        return
    _resolve(spec, None, 1.0)  # raises the unknown-trace error


def _resolve(spec: str, max_requests: int | None, time_scale: float) -> Trace:
    from toolkit.workloads.mooncake import load_mooncake, looks_like_mooncake

    if not isinstance(spec, str) or not spec or "\0" in spec:
        raise BadInput(f"trace: expected a trace name, path or generator spec, got {spec!r:.80}")
    kind, _, rest = spec.partition(":")
    if kind == "mooncake":
        return load_mooncake(rest, max_requests=max_requests, time_scale=time_scale)
    if kind == "mooncake-tiled":
        from toolkit.workloads.mooncake_tiled import load_tiled

        return load_tiled(rest, max_requests=max_requests, time_scale=time_scale)
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
    if kind in TRACE_SPECS:
        return _subset(generate(spec), max_requests, time_scale)
    raise BadInput(
        f"trace: unknown trace {spec!r}; committed traces: {', '.join(committed_traces()) or '-'}; "
        f"generators: {', '.join(g + '[:key=value,...]' for g in TRACE_SPECS)}; mooncake:PATH; "
        f"mooncake-tiled:COPIES:PATH; "
        f"or a path to a .jsonl file"
    )


def _subset(trace: Trace, max_requests: int | None, time_scale: float) -> Trace:
    if max_requests is not None:
        trace = trace.head(max_requests)
    if time_scale != 1.0:
        from dataclasses import replace

        trace.requests = [replace(r, arrival_s=r.arrival_s / time_scale) for r in trace.requests]
    return trace
