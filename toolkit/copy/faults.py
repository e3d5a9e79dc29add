"""Fault injection: make chosen copies fail (or loaded blocks come back corrupted), seeded and reproducible.

Spec (constructor argument, or the environment variable `KVTK_FAULT_INJECT` when none is given): comma-separated
items, e.g. `"load:0.5,seed=7"`, `"store:1.0"`, `"load:every=3"`, `"corrupt:every=2"`.
- `load:P` / `store:P`: each batch of that direction fails with probability P (0..1);
- `load:every=N` / `store:every=N`: the N-th, 2N-th, ... batch of that direction fails;
- `corrupt:P` / `corrupt:every=N`: a load that succeeds gets its device blocks' bytes inverted before it is
  reported complete (a silent corruption, for negative-control tests that must detect wrong KV);
- `late_load:P` / `late_store:P` (or `:every=N`): that batch starts `delay_s` late on its copy thread, so it
  completes (correctly) steps after it would have, and the batches queued behind it wait too (CPU backend only);
- `delay_s=D`: how late a late batch is, in seconds (default 0.05);
- `seed=S`: the random seed (default 0);
- `rank=R`: only the worker of that rank injects (tensor parallelism: a fault on one rank only).
Failed copies go through the backend's real failure path and come out as failed events, never as completions.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

ENV_VAR = "KVTK_FAULT_INJECT"
_KINDS = ("load", "store", "corrupt", "late_load", "late_store")
DEFAULT_DELAY_S = 0.05


@dataclass(frozen=True, kw_only=True)
class FaultRule:
    probability: float = 0.0
    every: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability: must be in [0, 1], got {self.probability}")
        if self.every < 0:
            raise ValueError(f"every: must be >= 0, got {self.every}")


@dataclass(frozen=True, kw_only=True)
class FaultSpec:
    rules: tuple[tuple[str, FaultRule], ...] = ()
    seed: int = 0
    delay_s: float = DEFAULT_DELAY_S
    rank: int | None = None  # None: every rank injects

    def __post_init__(self) -> None:
        if not 0.0 <= self.delay_s < float("inf"):
            raise ValueError(f"{ENV_VAR}: delay_s must be a number of seconds >= 0, got {self.delay_s}")

    def for_rank(self, rank: int) -> "FaultSpec":
        """The spec as the worker of `rank` applies it: no rules on the other ranks when `rank=R` was given."""
        return self if self.rank is None or self.rank == rank else FaultSpec(seed=self.seed, rank=self.rank)

    @property
    def has_late_copies(self) -> bool:
        return any(kind.startswith("late_") for kind, _ in self.rules)

    @property
    def active(self) -> bool:
        return bool(self.rules)

    @classmethod
    def parse(cls, text: str | None) -> "FaultSpec":
        if not text or not text.strip():
            return cls()
        rules, seed, delay_s, rank = [], 0, DEFAULT_DELAY_S, None
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            if item.startswith("seed="):
                seed = _number(item, item[5:], int)
                continue
            if item.startswith("rank="):
                rank = _number(item, item[5:], int)
                if rank < 0:
                    raise ValueError(f"{ENV_VAR}: rank must be >= 0 in {item!r}")
                continue
            if item.startswith("delay_s="):
                delay_s = _number(item, item[8:], float)
                continue
            kind, sep, value = item.partition(":")
            if not sep or kind not in _KINDS:
                raise ValueError(
                    f"{ENV_VAR}: bad item {item!r}; expected {'|'.join(_KINDS)}:P or :every=N, "
                    "or seed=S, delay_s=D, rank=R"
                )
            if value.startswith("every="):
                every = _number(item, value[6:], int)
                if every < 1:
                    raise ValueError(f"{ENV_VAR}: every must be >= 1 in {item!r}")
                rules.append((kind, FaultRule(every=every)))
            else:
                rules.append((kind, FaultRule(probability=_number(item, value, float))))
        return cls(rules=tuple(rules), seed=seed, delay_s=delay_s, rank=rank)

    @classmethod
    def from_env(cls) -> "FaultSpec":
        return cls.parse(os.environ.get(ENV_VAR))


def _number(item: str, text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{ENV_VAR}: bad number {text!r} in {item!r}") from None


class FaultInjector:
    """Decides, batch by batch, which copies fail and which loads get corrupted."""

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)
        self._counts = {kind: 0 for kind in _KINDS}
        self.injected = {kind: 0 for kind in _KINDS}  # batches hit, per kind: what a soak reconciles against

    def _decide(self, kind: str) -> bool:
        self._counts[kind] += 1
        hit = False
        for rule_kind, rule in self.spec.rules:
            if rule_kind != kind:
                continue
            if rule.every and self._counts[kind] % rule.every == 0:
                hit = True
            if rule.probability and self._rng.random() < rule.probability:
                hit = True
        if hit:
            self.injected[kind] += 1
        return hit

    def should_fail(self, direction_value: str) -> bool:
        return self.spec.active and self._decide(direction_value)

    def should_corrupt(self) -> bool:
        return self.spec.active and self._decide("corrupt")

    def delay_s(self, direction_value: str) -> float:
        """How late this batch of that direction starts (0.0: on time)."""
        late = self.spec.has_late_copies and self._decide(f"late_{direction_value}")
        return self.spec.delay_s if late else 0.0
