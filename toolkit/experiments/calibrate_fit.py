"""The fit behind `kvtk calibrate`: measured requests (`Sample`), the steps each one ran, and the three constants of

    step_s = overhead_s + max(flops / flops_per_s, bytes / bytes_per_s)

that minimise the squared relative error over them (`fit`), then the CPU tier's copy rate from the loads.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from toolkit.perfmodel.step_time import ScheduledWork, StepTimeModel


@dataclass(frozen=True)
class Sample:
    """One measured request: `steps` (each a list of `ScheduledWork`, as the engine batched it) took `seconds`."""

    kind: str  # "prefill" (TTFT of a lone request), "decode" (its decode steps, end - first token) or
    # "load" (TTFT of the same prompt again from the CPU tier: `load_bytes`, then `steps`)
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


def fit(model: StepTimeModel, samples: list[Sample]) -> dict:
    """Overhead, FLOP/s and bytes/s minimising the squared relative error of the compute samples (see the module
    doc), then the CPU tier's effective copy rate from the load samples: what their TTFT leaves after the steps."""
    loads = [s for s in samples if s.kind == "load" and s.load_bytes]
    samples = [s for s in samples if s.kind != "load"]
    flops_bytes = [[model.step_flops_bytes(list(step)) for step in s.steps] for s in samples]
    best = None
    for i in range(61):
        flops_per_s = 10 ** (9 + i * 0.075)  # 1 GFLOP/s .. 30 TFLOP/s
        for j in range(41):
            bytes_per_s = 10 ** (9 + j * 0.06)  # 1 GB/s .. 250 GB/s
            a, c = [], []
            for fb in flops_bytes:
                a.append(len(fb))
                c.append(sum(max(f / flops_per_s, b / bytes_per_s) for f, b in fb))
            num = sum(ai * (s.seconds - ci) / s.seconds**2 for ai, ci, s in zip(a, c, samples))
            den = sum(ai * ai / s.seconds**2 for ai, s in zip(a, samples))
            overhead = max(0.0, num / den)
            err = sum(((ai * overhead + ci) / s.seconds - 1) ** 2 for ai, ci, s in zip(a, c, samples))
            if best is None or err < best[0]:
                best = (err, overhead, flops_per_s, bytes_per_s)
    _, overhead, flops_per_s, bytes_per_s = best
    predicted = [len(fb) * overhead + sum(max(f / flops_per_s, b / bytes_per_s) for f, b in fb) for fb in flops_bytes]
    mape = sum(abs(p / s.seconds - 1) for p, s in zip(predicted, samples)) / len(samples)
    copy_rate, copy_latency, load_predicted = None, 0.0, []
    if loads:

        def steps_s(sample):
            return sum(
                overhead + max(f / flops_per_s, b / bytes_per_s)
                for f, b in (model.step_flops_bytes(list(step)) for step in sample.steps)
            )

        # What each load's TTFT leaves after its steps = latency + bytes / rate: a line through the points.
        points = [(s.load_bytes, max(0.0, s.seconds - steps_s(s))) for s in loads]
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        var = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
        if slope <= 0:  # no per-byte cost measurable at these sizes: all latency, bytes at the memcpy rate
            copy_rate, copy_latency = memcpy_bytes_per_s(), mean_y
        else:
            copy_rate, copy_latency = 1.0 / slope, max(0.0, mean_y - slope * mean_x)
        load_predicted = [steps_s(s) + copy_latency + s.load_bytes / copy_rate for s in loads]
    return {
        "overhead_s": overhead,
        "flops_per_s": flops_per_s,
        "bytes_per_s": bytes_per_s,
        "fit_mape": mape,
        "predicted_s": predicted + load_predicted,
        "samples": samples + (loads if load_predicted else []),
        "copy_bytes_per_s": copy_rate,
        "copy_latency_s": copy_latency,
    }


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
    best: dict[tuple, Sample] = {}
    for s in samples:
        key = (s.kind, s.prompt_tokens, s.batch)
        if key not in best or s.seconds < best[key].seconds:
            best[key] = s
    return list(best.values())


def mape(predicted: list[float], measured: list[float]) -> float:
    """Mean absolute percentage error of `predicted` against `measured` (pairs where both exist)."""
    pairs = [(p, m) for p, m in zip(predicted, measured) if p is not None and m]
    if not pairs:
        raise ValueError("mape: no request has both a prediction and a measurement")
    return sum(abs(p / m - 1) for p, m in pairs) / len(pairs)
