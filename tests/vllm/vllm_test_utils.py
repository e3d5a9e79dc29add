"""Helpers shared by the vLLM tests (a uniquely named module: `conftest` names collide across test folders)."""

from __future__ import annotations

import random


def random_prompts(n: int, length: int, *, seed: int = 0, prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = list(prefix or [])
    return [prefix + [rng.randrange(3, 2000) for _ in range(length - len(prefix))] for _ in range(n)]
