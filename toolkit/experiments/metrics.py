"""The serving metrics papers report, per (variant, phase), from what the engines record per request.

    slo = Slo(ttft_ms=2000.0, tpot_ms=100.0)
    rows = phase_metrics(requests, summary["phases"], slo)     # requests: requests.parquet as a polars frame
    write_metrics(run_dir, slo)                                 # metrics.json next to summary.json

What each engine records (`engines/records.py`) decides what is here; nothing is filled in where it is not:
- TTFT and e2e: every engine (dry: modelled on the virtual clock; live and server: measured).
- TPOT (time per output token after the first, `(e2e - TTFT) / (output tokens - 1)`, per request) and output
  tokens/s: where a record counts its output tokens: every engine (dry: modelled, its decode steps are timed on the
  virtual clock by the step-time model; live, server: measured). A run written before the count: live and server
  rows count their output token ids, dry rows have none.
- ITL (inter-token latency: the gaps between consecutive output tokens, pooled over the phase's requests as
  `vllm bench serve` pools them): only the server engine, which streams and times each token at the client. The
  live engine (vLLM's offline API) gets each request's output at its end. `NOT_MEASURED` says so per engine.
- Goodput: requests that meet the SLO (TTFT, and TPOT where recorded) per second of the phase (dry: modelled
  seconds; live, server: wall seconds).
- The host link: bytes loaded CPU -> device and stored device -> CPU, and loaded bytes per CPU-tier token.
- TTFT per turn, for traces of multi-turn sessions (a request that extends an earlier one is its next turn).
Percentiles are nearest rank (as `results.percentiles`): p99 of 10 values is the largest.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from toolkit.errors import BadInput

if TYPE_CHECKING:
    import polars as pl

    from toolkit.workloads.traces import Trace

METRICS_FILE = "metrics.json"
METRICS_VERSION = 1
DEFAULT_SLO_TTFT_MS = 2000.0  # a chat-serving TTFT bound of the order DistServe and vLLM's benchmarks use
DEFAULT_SLO_TPOT_MS = 100.0  # about ten tokens a second, faster than people read
# What each engine cannot measure, said once for tables and reports ("not measured by this engine").
NOT_MEASURED: dict[str, dict[str, str]] = {
    "dry": {"ITL": "its virtual clock times steps, not tokens streamed to a client; its TPOT is modelled"},
    "live": {"ITL": "vLLM's offline API hands each request's output over at its end, with no per-token times"},
    "server": {},
}


@dataclass(frozen=True, slots=True)
class Slo:
    """The service-level objective goodput counts against."""

    ttft_ms: float = DEFAULT_SLO_TTFT_MS
    tpot_ms: float = DEFAULT_SLO_TPOT_MS

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise BadInput(f"slo_{name}: must be a finite number > 0, got {value!r}")

    def describe(self) -> str:
        return f"TTFT <= {self.ttft_ms:,.0f} ms and TPOT <= {self.tpot_ms:,.0f} ms (TPOT where recorded)"


@dataclass(slots=True)
class PhaseMetrics:
    """One (variant, phase): times in ms, None where the engine does not record the quantity."""

    variant: str
    phase: str
    requests: int
    ttft_mean_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_mean_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    output_tokens: int | None = None
    duration_s: float | None = None
    duration_clock: str | None = None  # "modelled" (dry) or "wall"
    output_tokens_per_s: float | None = None
    slo_met_requests: int | None = None
    slo_met_fraction: float | None = None
    goodput_rps: float | None = None
    load_bytes: int = 0
    store_bytes: int = 0
    load_bytes_per_loaded_token: float | None = None


METRIC_NAMES = tuple(f.name for f in fields(PhaseMetrics))


def nearest_rank(ordered: Sequence[float], p: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(0, -(-int(p * len(ordered)) // 100) - 1)]


def _ms(values: list[float], stem: str) -> dict[str, float | None]:
    ordered = sorted(v * 1e3 for v in values)
    out: dict[str, float | None] = {f"{stem}_mean_ms": math.fsum(ordered) / len(ordered) if ordered else None}
    for p in (50, 90, 99):
        if f"{stem}_p{p}_ms" in METRIC_NAMES:
            out[f"{stem}_p{p}_ms"] = nearest_rank(ordered, p)
    return out


def _duration(phase_row: dict[str, Any] | None) -> tuple[float | None, str | None]:
    if not phase_row:
        return None, None
    if phase_row.get("modelled_s"):
        return float(phase_row["modelled_s"]), "modelled"
    if phase_row.get("wall_s"):
        return float(phase_row["wall_s"]), "wall"
    return None, None


def _output_tokens(row: dict[str, Any]) -> int:
    """The request's output tokens: its count where recorded, else its output token ids (older runs)."""
    count = row.get("num_output_tokens")
    return int(count) if count is not None else len(row["output_token_ids"] or [])


def _one_phase(
    variant: str, phase: str, rows: list[dict[str, Any]], summary_row: dict[str, Any] | None, slo: Slo
) -> PhaseMetrics:
    ttfts = [r["ttft_s"] for r in rows if r["ttft_s"] is not None]
    e2es = [r["e2e_s"] for r in rows if r["e2e_s"] is not None]
    counts = [_output_tokens(r) for r in rows]
    has_outputs = any(counts)
    tpots = [
        (r["e2e_s"] - r["ttft_s"]) / (n - 1)
        for r, n in zip(rows, counts)
        if n >= 2 and r["e2e_s"] is not None and r["ttft_s"] is not None
    ]
    gaps = [gap for r in rows for gap in (r.get("itl_s") or ())]
    duration, clock = _duration(summary_row)
    out = PhaseMetrics(variant=variant, phase=phase, requests=len(rows), duration_s=duration, duration_clock=clock)
    times = {**_ms(ttfts, "ttft"), **_ms(e2es, "e2e")}
    times |= (_ms(tpots, "tpot") if tpots else {}) | (_ms(gaps, "itl") if gaps else {})
    for key, value in times.items():
        setattr(out, key, value)
    if has_outputs:
        out.output_tokens = sum(counts)
        out.output_tokens_per_s = out.output_tokens / duration if duration else None
    if ttfts:
        met = 0
        for r, n in zip(rows, counts):
            ok_ttft = r["ttft_s"] is not None and r["ttft_s"] * 1e3 <= slo.ttft_ms
            ok_tpot = n < 2 or r["e2e_s"] is None or (r["e2e_s"] - r["ttft_s"]) / (n - 1) * 1e3 <= slo.tpot_ms
            met += bool(ok_ttft and ok_tpot)
        out.slo_met_requests = met
        out.slo_met_fraction = met / len(rows) if rows else None
        out.goodput_rps = met / duration if duration else None
    out.load_bytes = sum(int(r["load_bytes"] or 0) for r in rows)
    out.store_bytes = sum(int(r["store_bytes"] or 0) for r in rows)
    loaded = sum(int(r["external_hit_tokens"] or 0) for r in rows)
    out.load_bytes_per_loaded_token = out.load_bytes / loaded if loaded else None
    return out


def phase_metrics(requests: pl.DataFrame, summary_phases: list[dict[str, Any]], slo: Slo) -> list[PhaseMetrics]:
    """One `PhaseMetrics` per (variant, phase) of the summary, in its order (the warm-up request is in no phase)."""
    wanted = ["variant", "phase", "ttft_s", "e2e_s", "output_token_ids", "load_bytes", "store_bytes"]
    wanted += ["external_hit_tokens"] + [c for c in ("num_output_tokens", "itl_s") if c in requests.columns]
    by_phase: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in requests.select(wanted).iter_rows(named=True):
        by_phase.setdefault((row["variant"], row["phase"]), []).append(row)
    out = []
    for summary_row in summary_phases:
        key = (summary_row["variant"], summary_row["phase"])
        out.append(_one_phase(*key, by_phase.get(key, []), summary_row, slo))
    return out


@dataclass(slots=True)
class TurnTtft:
    """TTFT of one turn of a multi-turn session trace (turn 1: a session's first request), per (variant, phase)."""

    variant: str
    phase: str
    turn: int
    requests: int
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None


def session_turns(trace: Trace) -> dict[str, int]:
    """request_id -> its turn in its session (1, 2, ...), for traces whose requests extend earlier ones; {} for a
    trace without sessions (a Mooncake trace's requests share blocks, not turns)."""
    from toolkit.workloads.clients import previous_turns

    previous = previous_turns(trace)
    turns: dict[str, int] = {}
    for req in trace.requests:  # trace order: a previous turn is numbered before its next
        before = previous.get(req.request_id)
        turns[req.request_id] = turns.get(before, 0) + 1 if before else 1
    return turns if any(t > 1 for t in turns.values()) else {}


def turns_of_trace(trace_spec: str, max_requests: int | None = None) -> dict[str, int]:
    """`session_turns` of the trace a run replayed, resolved again from its spec."""
    from toolkit.workloads.resolve import resolve_trace

    return session_turns(resolve_trace(trace_spec, max_requests=max_requests))


def turn_ttfts(requests: pl.DataFrame, turns: Mapping[str, int]) -> list[TurnTtft]:
    """Per (variant, phase, turn): the TTFT percentiles; empty without sessions."""
    groups: dict[tuple[str, str, int], list[float]] = {}
    for row in requests.select("variant", "phase", "request_id", "ttft_s").iter_rows(named=True):
        turn = turns.get(row["request_id"])
        if turn is not None and row["ttft_s"] is not None and row["phase"] != "warmup":
            groups.setdefault((row["variant"], row["phase"], turn), []).append(row["ttft_s"] * 1e3)
    out = []
    for (variant, phase, turn), values in groups.items():
        ordered = sorted(values)
        p50, p90 = nearest_rank(ordered, 50), nearest_rank(ordered, 90)
        out.append(TurnTtft(variant, phase, turn, len(values), p50, p90))
    return sorted(out, key=lambda t: (t.turn,))  # stable: run order within a turn


def write_metrics(run_dir: str | Path, slo: Slo, turns: Mapping[str, int] | None = None) -> Path | None:
    """metrics.json in a finished run folder (None when it has no summary or requests to read); `turns`: each
    request's turn in its session (`session_turns`), for TTFT per turn."""
    import polars as pl

    from toolkit.private_fs import write_private_file

    run_dir = Path(run_dir)
    summary_path, requests_path = run_dir / "summary.json", run_dir / "requests.parquet"
    if not summary_path.is_file() or not requests_path.is_file():
        return None
    summary = json.loads(summary_path.read_text())  # our own file, written by this run
    requests = pl.read_parquet(requests_path)
    rows = phase_metrics(requests, summary.get("phases", []), slo)
    document = {
        "version": METRICS_VERSION,
        "slo": asdict(slo),
        "slo_text": slo.describe(),
        "not_measured": NOT_MEASURED.get(str(summary.get("engine")), {}),
        "phases": [asdict(r) for r in rows],
        "ttft_by_turn": [asdict(t) for t in turn_ttfts(requests, turns or {})],
    }
    return write_private_file(run_dir / METRICS_FILE, json.dumps(document, indent=2))


def write_sweep_metrics(sweep_dir: str | Path, slo: Slo) -> int:
    """metrics.json in every finished cell of a sweep folder (a cell without a run, a notebook's, is left as is);
    each trace's sessions resolved once. Returns the cells written."""
    turns: dict[tuple[str, int | None], dict[str, int]] = {}
    written = 0
    for cell in sorted((Path(sweep_dir) / "cells").glob("cell-*")):
        if not (cell / "params.json").is_file():  # not finished, or not a run
            continue
        config = json.loads((cell / "params.json").read_text()).get("config") or {}  # our own file
        key = (str(config.get("trace")), config.get("max_requests"))
        if key not in turns:
            turns[key] = turns_of_trace(*key)
        written += write_metrics(cell, slo, turns[key]) is not None
    return written


# Two-sided 95% Student t quantiles by degrees of freedom (n - 1); beyond 30, the normal's 1.96.
_T95: tuple[float, ...] = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
)
_T95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the half-width of its 95% interval (Student t; None with one value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    t = _T95[n - 2] if n - 2 < len(_T95) else 1.96
    return mean, t * math.sqrt(var / n)
