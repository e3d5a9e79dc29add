"""What CPU tier size reaches 50/90/99% of an infinite tier's CPU-tier tokens (`kvtk size`).

The infinite tier is a run whose tier holds the whole trace (`kvtk replay`'s default size): nothing is evicted, so
its CPU-tier tokens are the most any tier can serve behind the same device cache. The search measures other sizes
with the same run (`measure(tier_gib)`, one dry run each) in two steps, at most `max_runs` runs in all:

1. halving from the infinite tier's size until a size falls below the smallest target (or the tier's minimum, two
   blocks per rank, is reached);
2. per target, bisection on a log scale between the largest size tried that falls short and the smallest that
   reaches it, until they are within `tolerance` of each other (0.1: the answer is at most 10% above the size where
   the target is first reached, as far as the tokens grow with the tier).

The answer for a target is the smallest size tried that reaches it, and the largest size tried below it that does
not. A tier that holds fewer blocks per rank than the device cache is flagged: an inclusive tier keeps copies of
what the device holds, so it adds hits only for what the device has already evicted (or after a reset).

The same search sizes a disk tier below a fixed DRAM tier (`kvtk size --tier disk --cpu-gib C`): the measured runs
vary the disk, the largest holds the trace, and the targets are shares of the `ceiling`, a DRAM tier holding the
trace; a target that even the largest disk misses (disk hits slower than recomputing are declined) has no answer.
A shared store below a fixed DRAM tier and disk (`--tier store --cpu-gib C --disk-gib D`) is sized the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

DEFAULT_FRACTIONS = (0.5, 0.9, 0.99)
DEFAULT_TOLERANCE = 0.1
DEFAULT_MAX_RUNS = 20


@dataclass(frozen=True, slots=True)
class SizePoint:
    """One run: its tier size, the CPU-tier tokens of the measured phase, and the blocks per rank of both caches."""

    tier_gib: float
    cpu_tier_tokens: int
    cpu_blocks_per_rank: int
    device_blocks_per_rank: int
    run_dir: str
    oracle_tokens: int | None = None  # an infinite cache's reusable tokens in the phase (device and tier together)
    device_hit_tokens: int | None = None

    @property
    def below_device(self) -> bool:
        return self.cpu_blocks_per_rank < self.device_blocks_per_rank


@dataclass(frozen=True, slots=True)
class SizeAnswer:
    fraction: float  # of the infinite tier's CPU-tier tokens
    target_tokens: float
    reached: SizePoint | None  # the smallest size tried that reaches the target
    short: SizePoint | None  # the largest size tried below `reached` that does not

    @property
    def bracket_ratio(self) -> float | None:
        """How far apart the two sizes are (1.08: within 8%); None when one side was not found."""
        if self.reached is None or self.short is None:
            return None
        return self.reached.tier_gib / self.short.tier_gib


@dataclass(frozen=True, slots=True)
class SizeSearch:
    infinite: SizePoint  # the largest size of the tier searched: the first run
    points: list[SizePoint]  # every run of the tier searched, the infinite tier's first
    answers: list[SizeAnswer]
    tolerance: float
    max_runs: int
    # Sizing a disk below a fixed DRAM tier: the targets are shares of `ceiling` (a DRAM tier holding the trace, no
    # disk), and `base` is the DRAM tier alone. Both None when the CPU tier itself is searched.
    ceiling: SizePoint | None = None
    base: SizePoint | None = None
    # With a ceiling, the report's words: the tier searched below the fixed ones ("disk" or "store"), and the fixed
    # tiers above it ("0.5 GiB of DRAM", "0.5 GiB of DRAM and a 2 GiB disk"; empty: the base's DRAM size).
    tier: str = "disk"
    above: str = ""

    @property
    def ceiling_tokens(self) -> int:
        return (self.ceiling or self.infinite).cpu_tier_tokens

    @property
    def hit_run_cap(self) -> bool:
        return len(self.points) >= self.max_runs and any(
            a.bracket_ratio is not None and a.bracket_ratio > 1 + self.tolerance for a in self.answers
        )


def search(
    measure: Callable[[float], SizePoint],
    infinite: SizePoint,
    *,
    min_gib: float,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    tolerance: float = DEFAULT_TOLERANCE,
    max_runs: int = DEFAULT_MAX_RUNS,
    ceiling: SizePoint | None = None,
    base: SizePoint | None = None,
) -> SizeSearch:
    """Halving, then bisection per target (module docstring); `infinite` counts as the first run. With `ceiling`
    (a disk searched below a fixed DRAM tier), the targets are shares of its tokens, and a target the largest size
    does not reach is left unanswered. With `base` (the fixed tiers alone), a target they reach is answered with no
    size of the searched tier (`tier_gib` 0) and not searched for."""
    points = [infinite]
    most = (ceiling or infinite).cpu_tier_tokens
    targets = [f * most for f in fractions]
    searched = [t for t in targets if base is None or base.cpu_tier_tokens < t]
    if most > 0 and searched and infinite.cpu_tier_tokens >= min(searched):
        size = infinite.tier_gib / 2
        while len(points) < max_runs:
            size = max(size, min_gib)
            point = measure(size)
            points.append(point)
            if point.cpu_tier_tokens < min(searched) or size <= min_gib:
                break
            size /= 2
        for target in sorted(searched, reverse=True):
            while len(points) < max_runs:
                reached, short = _bracket(points, target)
                if reached is None or short is None or reached.tier_gib / short.tier_gib <= 1 + tolerance:
                    break
                points.append(measure(math.sqrt(reached.tier_gib * short.tier_gib)))
    if most > 0:
        alone = None if base is None else replace(base, tier_gib=0.0)  # the fixed tiers, none of the searched one
        answers = [
            SizeAnswer(f, t, *_bracket(points, t)) if t in searched else SizeAnswer(f, t, alone, None)
            for f, t in zip(fractions, targets)
        ]
    else:  # the device cache holds all the reuse: no tier size adds a token
        answers = [SizeAnswer(f, 0.0, None, None) for f in fractions]
    return SizeSearch(infinite, points, answers, tolerance, max_runs, ceiling, base)


def _bracket(points: list[SizePoint], target: float) -> tuple[SizePoint | None, SizePoint | None]:
    ordered = sorted(points, key=lambda p: p.tier_gib)
    reached = next((p for p in ordered if p.cpu_tier_tokens >= target), None)
    if reached is None:
        return None, None
    shorts = [p for p in ordered if p.tier_gib < reached.tier_gib and p.cpu_tier_tokens < target]
    return reached, (shorts[-1] if shorts else None)
