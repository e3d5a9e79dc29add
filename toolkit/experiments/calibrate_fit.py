"""The fit behind `kvtk calibrate`: measured steps and requests (`Sample`), the steps each one ran, and the three
constants of

    step_s = overhead_s + flops / flops_per_s + bytes / bytes_per_s

(a CPU core runs one op at a time, each waiting for its own bytes: the times add, where a GPU overlaps them) that
minimise the squared relative error over them (`fit`), then the CPU tier's copy rate from the loads.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from toolkit.perfmodel.step_time import ScheduledWork, StepTimeModel

if TYPE_CHECKING:
    from toolkit.engines.records import RequestRecord


@dataclass(frozen=True)
class Sample:
    """One measured request: `steps` (each a list of `ScheduledWork`, as the engine batched it) took `seconds`."""

    kind: str  # "step" (one engine step as the live engine timed it), "prefill" (TTFT of a lone request),
    # "decode" (its decode steps, end - first token) or "load" (TTFT of the same prompt again from the CPU tier:
    # `load_bytes`, then `steps`)
    prompt_tokens: int
    batch: int
    seconds: float
    steps: tuple[tuple[ScheduledWork, ...], ...]
    load_bytes: int = 0


def prefill_steps(prompt_tokens: int, chunk_tokens: int) -> tuple[tuple[ScheduledWork, ...], ...]:
    out, done = [], 0
    while done < prompt_tokens:
        n = min(chunk_tokens, prompt_tokens - done)
        out.append((ScheduledWork(n, done, done + n == prompt_tokens),))
        done += n
    return tuple(out)


def decode_steps(prompt_tokens: int, num_tokens: int, batch: int) -> tuple[tuple[ScheduledWork, ...], ...]:
    """The `num_tokens - 1` decode steps after the first token, `batch` requests of the same length together."""
    return tuple(tuple(ScheduledWork(1, prompt_tokens + j, True) for _ in range(batch)) for j in range(num_tokens - 1))


SLOW_OUTLIER = 1.5  # a step measured this many times its fit's prediction waited for other tenants
TRIM_PASSES = 4  # refits after dropping the slow tail, until nothing more is dropped


def fit(model: StepTimeModel, samples: list[Sample]) -> dict[str, Any]:
    """Overhead, FLOP/s and bytes/s minimising the squared relative error of the compute samples (see the module
    doc), then the CPU tier's effective copy rate from the load samples: what their TTFT leaves after the steps.

    Refitted without the samples measured over `SLOW_OUTLIER` times the last fit's prediction, until none more go
    (at most `TRIM_PASSES` refits): on a shared host a step can be slowed by the other tenants but never sped up, so
    the slow tail is noise. The dropped count is reported (`num_dropped`)."""
    loads = [s for s in samples if s.kind == "load" and s.load_bytes]
    compute = [s for s in samples if s.kind != "load"]
    flops_bytes = [[model.step_flops_bytes(list(step)) for step in s.steps] for s in compute]
    kept = list(range(len(compute)))
    for passes_left in range(TRIM_PASSES, -1, -1):
        overhead, flops_per_s, bytes_per_s = _fit_rates(
            [flops_bytes[i] for i in kept], [compute[i].seconds for i in kept]
        )
        predicted = _predict(flops_bytes, overhead, flops_per_s, bytes_per_s)
        again = [i for i, (p, s) in enumerate(zip(predicted, compute)) if s.seconds <= SLOW_OUTLIER * p]
        if not passes_left or again == kept or len(again) < 3:
            break  # the last fit is of what is kept
        kept = again
    mape = sum(abs(predicted[i] / compute[i].seconds - 1) for i in kept) / len(kept)
    copy_rate, copy_latency, load_predicted = None, 0.0, []
    rates = (overhead, flops_per_s, bytes_per_s)
    if loads:

        def steps_s(sample: Sample) -> float:
            return _predict([[model.step_flops_bytes(list(step)) for step in sample.steps]], *rates)[0]

        # What each load's TTFT leaves after its steps = latency + bytes / rate: a line through the points.
        points = [(s.load_bytes, max(0.0, s.seconds - steps_s(s))) for s in loads]
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        var = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
        if slope <= 0 or mean_y < slope * mean_x:
            # The bytes do not explain the loads (no slope, or a line that would start below zero): the cost is
            # per load, not per byte (the step that starts the copies, the steps that wait for them), so a fixed
            # latency, paid once per step's loads as the clock charges it, and the bytes at the host's memcpy rate.
            # A steep line through a negative intercept instead charged two loads in one step twice (measured: the
            # dry engine 1.35x the live engine's hot TTFT at two clients, 0.96x at one).
            copy_rate = memcpy_bytes_per_s()
            copy_latency = sum(max(0.0, y - x / copy_rate) for x, y in points) / len(points)
        else:
            copy_rate, copy_latency = 1.0 / slope, mean_y - slope * mean_x
        load_predicted = [steps_s(s) + copy_latency + s.load_bytes / copy_rate for s in loads]
    return {
        "overhead_s": overhead,
        "flops_per_s": flops_per_s,
        "bytes_per_s": bytes_per_s,
        "fit_mape": mape,
        "num_dropped": len(compute) - len(kept),
        "predicted_s": predicted + load_predicted,
        "samples": compute + (loads if load_predicted else []),
        "copy_bytes_per_s": copy_rate,
        "copy_latency_s": copy_latency,
    }


def _fit_rates(flops_bytes: list[list[tuple[float, float]]], seconds: list[float]) -> tuple[float, float, float]:
    """The (overhead, FLOP/s, bytes/s) of least squared relative error for `step = overhead + flops / F + bytes / B`
    (linear in overhead, 1/F and 1/B: one least-squares solve), none negative: of the non-negative solutions over
    the subsets of the three terms, the one of least error. A rate whose term is dropped is returned as inf."""
    import itertools

    import numpy as np

    measured = np.array(seconds)
    # Per sample: its step count, total FLOPs and total bytes, each row divided by the measurement (relative error).
    features = np.array([[len(fb), sum(f for f, _ in fb), sum(b for _, b in fb)] for fb in flops_bytes], dtype=float)
    scaled = features / measured[:, None]
    best = None
    for size in (3, 2, 1):
        for cols in itertools.combinations(range(3), size):
            coef, *_ = np.linalg.lstsq(scaled[:, cols], np.ones(len(measured)), rcond=None)
            if (coef < 0).any():
                continue
            full = np.zeros(3)
            full[list(cols)] = coef
            err = float(((scaled @ full - 1) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, full)
    if best is None:
        raise ValueError("calibrate: no non-negative fit of the step samples")
    overhead, per_flop, per_byte = best[1]
    return float(overhead), 1.0 / per_flop if per_flop else math.inf, 1.0 / per_byte if per_byte else math.inf


def _predict(
    flops_bytes: Sequence[Sequence[tuple[float, float]]], overhead: float, flops_per_s: float, bytes_per_s: float
) -> list[float]:
    return [len(fb) * overhead + sum(f / flops_per_s + b / bytes_per_s for f, b in fb) for fb in flops_bytes]


def memcpy_bytes_per_s(num_bytes: int = 64 << 20) -> float:
    """Host memory copy rate (the CPU tier's loads and stores are memcpys here), best of 3."""
    src, dst = bytearray(num_bytes), bytearray(num_bytes)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        dst[:] = src
        best = min(best, time.perf_counter() - start)
    return num_bytes / best


def fastest(samples: list[Sample]) -> list[Sample]:
    """Per shape, the fastest repeat: on a shared host a slower one measured the other tenants, not the engine."""
    best: dict[tuple[str, int, int], Sample] = {}
    for s in samples:
        key = (s.kind, s.prompt_tokens, s.batch)
        if key not in best or s.seconds < best[key].seconds:
            best[key] = s
    return list(best.values())


def _relative_errors(predicted: Sequence[float | None], measured: Sequence[float | None]) -> list[float]:
    errors = [abs(p / m - 1) for p, m in zip(predicted, measured) if p is not None and m]
    if not errors:
        raise ValueError("mape: no request has both a prediction and a measurement")
    return errors


def mape(predicted: Sequence[float | None], measured: Sequence[float | None]) -> float:
    """Mean absolute percentage error of `predicted` against `measured` (pairs where both exist)."""
    errors = _relative_errors(predicted, measured)
    return sum(errors) / len(errors)


def median_ratio(predicted: Sequence[float | None], measured: Sequence[float | None]) -> float:
    """The median request's `predicted / measured` (pairs where both exist; the upper median of an even count): 1 is
    exact, 2 or 0.5 a 2x disagreement either way (an error in percent reads 2x slower and 2x faster unevenly)."""
    ratios = sorted(p / m for p, m in zip(predicted, measured) if p is not None and m)
    if not ratios:
        raise ValueError("median_ratio: no request has both a prediction and a measurement")
    return ratios[len(ratios) // 2]


def worst_ratio(predicted: Sequence[float | None], measured: Sequence[float | None]) -> float:
    """The largest disagreement of one pair as a ratio >= 1 either way (2: one is twice the other)."""
    ratios = [p / m for p, m in zip(predicted, measured) if p and m]
    if not ratios:
        raise ValueError("worst_ratio: no request has both a prediction and a measurement")
    return max(max(r, 1 / r) for r in ratios)


def median_ape(predicted: Sequence[float | None], measured: Sequence[float | None]) -> float:
    """The median request's absolute percentage error (pairs where both exist; the upper median of an even count)."""
    errors = sorted(_relative_errors(predicted, measured))
    return errors[len(errors) // 2]


def least_slowed(runs: list[list[RequestRecord]]) -> list[RequestRecord]:
    """Per request, its fastest TTFT and e2e over repeated live runs of one phase (the first run's record
    otherwise): other tenants slow a run and never speed one up, and the calibration keeps its fastest repeats too."""
    import dataclasses

    def fastest(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return min(known) if known else None

    return [
        dataclasses.replace(recs[0], ttft_s=fastest([r.ttft_s for r in recs]), e2e_s=fastest([r.e2e_s for r in recs]))
        for recs in zip(*runs)
    ]


def compare_requests(modelled: Sequence[RequestRecord], measured: Sequence[RequestRecord]) -> dict[str, Any]:
    """One phase's dry (`modelled`) and live (`measured`) records, request by request: errors, ratios, hits."""
    dry_ttft, live_ttft = [r.ttft_s for r in modelled], [r.ttft_s for r in measured]
    dry_e2e, live_e2e = [r.e2e_s for r in modelled], [r.e2e_s for r in measured]
    return {
        "requests": len(measured),
        "ttft_mape": mape(dry_ttft, live_ttft),
        "e2e_mape": mape(dry_e2e, live_e2e),
        # The median request's: one request the host preempted moves the mean, not the median.
        "ttft_median_ape": median_ape(dry_ttft, live_ttft),
        "e2e_median_ape": median_ape(dry_e2e, live_e2e),
        "ttft_median_ratio": median_ratio(dry_ttft, live_ttft),
        "e2e_median_ratio": median_ratio(dry_e2e, live_e2e),
        "live_hit_tokens": sum(r.local_hit_tokens + r.external_hit_tokens for r in measured),
        "dry_hit_tokens": sum(r.local_hit_tokens + r.external_hit_tokens for r in modelled),
        # The request furthest from live, TTFT or e2e, as a ratio >= 1 either way (2: a 2x disagreement).
        "worst_ratio": worst_ratio(dry_ttft + dry_e2e, live_ttft + live_e2e),
        "within_2x": share_within(2.0, modelled, measured),
        "request_ids": [r.request_id for r in measured],
        "live_ttft_s": live_ttft,
        "dry_ttft_s": dry_ttft,
        "live_e2e_s": live_e2e,
        "dry_e2e_s": dry_e2e,
    }


def share_within(factor: float, modelled: Sequence[RequestRecord], measured: Sequence[RequestRecord]) -> float:
    """The share of requests whose dry TTFT and e2e are both within `factor` of the live ones, either way."""
    ok = [
        all(p and m and 1 / factor <= p / m <= factor for p, m in ((d.ttft_s, lv.ttft_s), (d.e2e_s, lv.e2e_s)))
        for d, lv in zip(modelled, measured)
    ]
    return sum(ok) / len(ok) if ok else 0.0
