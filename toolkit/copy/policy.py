"""Which backend copies a batch: a small table keyed by bytes per descriptor and descriptor count.

Chosen once at start-up (a static default from the peers' measurements, or a table measured on this machine by
`measure_policy`), then only looked up per batch; a config string overrides it (`parse_policy`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

CPU = "cpu"
CUDA_DMA = "cuda-dma"
TRITON = "triton"

# vLLM's tuned crossover on H100 (docs/reference-behaviour.md, "Copy engines and kernels"): a kernel beats DMA
# below ~28 KiB per descriptor with >= 16 descriptors. On an H200 against this toolkit's chunked DMA (kvtk bench
# copy --block-counts, docs/results/2026-12-04-h200-copy.md) the kernel was level or slower up to 256 descriptors
# of 4-16 KiB and 1.4-3.7x faster from 1,024; at 64 KiB the chunked DMA won. Where they are level the copy engines
# are preferred (a kernel takes SMs from the model), hence 512, not 16.
_TRITON_MAX_BYTES = 28 * 1024
TRITON_MIN_DESCRIPTORS = 512


@dataclass(frozen=True, kw_only=True)
class PolicyRule:
    """Use `backend` when bytes per descriptor <= `max_bytes_per_descriptor` and count >= `min_descriptors`."""

    backend: str
    max_bytes_per_descriptor: int
    min_descriptors: int = 1

    def matches(self, bytes_per_descriptor: float, num_descriptors: int) -> bool:
        return bytes_per_descriptor <= self.max_bytes_per_descriptor and num_descriptors >= self.min_descriptors


@dataclass(frozen=True, kw_only=True)
class BackendPolicy:
    rules: tuple[PolicyRule, ...] = ()  # first match wins
    default: str = CPU

    def pick(self, *, bytes_per_descriptor: float, num_descriptors: int, available: Iterable[str]) -> str:
        names = set(available)
        for rule in self.rules:
            if rule.backend in names and rule.matches(bytes_per_descriptor, num_descriptors):
                return rule.backend
        if self.default in names:
            return self.default
        raise ValueError(f"default: backend {self.default!r} is not available (have {sorted(names)})")

    def describe(self) -> str:
        parts = [
            f"{r.backend}<={r.max_bytes_per_descriptor}" + (f"@{r.min_descriptors}" if r.min_descriptors > 1 else "")
            for r in self.rules
        ]
        return ",".join(parts + [self.default])


def default_policy(device_type: str, available: Sequence[str]) -> BackendPolicy:
    if device_type != "cuda":
        return BackendPolicy(default=CPU)
    rules = ()
    if TRITON in available:
        rules = (
            PolicyRule(
                backend=TRITON, max_bytes_per_descriptor=_TRITON_MAX_BYTES, min_descriptors=TRITON_MIN_DESCRIPTORS
            ),
        )
    return BackendPolicy(rules=rules, default=CUDA_DMA if CUDA_DMA in available else available[0])


def parse_policy(text: str) -> BackendPolicy:
    """`"triton<=32768@16,cuda-dma"`: rules `name<=max_bytes[@min_descriptors]`, then the default name."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not items:
        raise ValueError("policy: empty")
    rules = []
    for item in items[:-1]:
        name, sep, limit = item.partition("<=")
        if not sep:
            raise ValueError(f"policy: bad rule {item!r}; expected name<=max_bytes[@min_descriptors]")
        limit, _, count = limit.partition("@")
        try:
            rules.append(
                PolicyRule(
                    backend=name, max_bytes_per_descriptor=int(limit), min_descriptors=int(count) if count else 1
                )
            )
        except ValueError:
            raise ValueError(f"policy: bad numbers in {item!r}") from None
    return BackendPolicy(rules=tuple(rules), default=items[-1])


def policy_from_timings(
    seconds: Mapping[tuple[str, int], float], *, default: str, min_descriptors: Mapping[str, int] | None = None
) -> BackendPolicy:
    """Pure: from `{(backend, bytes_per_descriptor): seconds}` build rules `fastest backend up to this size`.

    Sizes are scanned in increasing order; consecutive sizes with the same winner merge into one rule. The
    largest size's winner becomes the default (it also covers anything larger). `min_descriptors[name]` bounds a
    rule for `name` from below: the timings come from large batches, and a kernel that wins there can lose on a
    handful of descriptors (TRITON_MIN_DESCRIPTORS).
    """
    floors = min_descriptors or {}
    sizes = sorted({size for _, size in seconds})
    if not sizes:
        return BackendPolicy(default=default)
    winners = []
    for size in sizes:
        candidates = {name: t for (name, s), t in seconds.items() if s == size}
        winners.append((size, min(candidates, key=candidates.get)))
    rules: list[PolicyRule] = []
    for index, (size, name) in enumerate(winners[:-1]):
        if winners[index + 1][1] != name:
            rules.append(PolicyRule(backend=name, max_bytes_per_descriptor=size, min_descriptors=floors.get(name, 1)))
    return BackendPolicy(rules=tuple(rules), default=winners[-1][1])


def measure_policy(
    run: Callable[[str, int], None],
    backends: Sequence[str],
    sizes: Sequence[int],
    *,
    repeats: int = 3,
    default: str,
    min_descriptors: Mapping[str, int] | None = None,
) -> BackendPolicy:
    """Time `run(backend, bytes_per_descriptor)` (one representative batch, synchronised) and build the table."""
    seconds = {}
    for name in backends:
        for size in sizes:
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                run(name, size)
                best = min(best, time.perf_counter() - start)
            seconds[(name, size)] = best
    return policy_from_timings(seconds, default=default, min_descriptors=min_descriptors)
