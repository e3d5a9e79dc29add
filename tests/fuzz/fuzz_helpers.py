"""Helpers of the bad-input suite (imported by its test modules)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

# Property tests here must stay fast on a shared 2-core machine: few examples, a per-example deadline that proves
# "bounded time" (a parse that materialises a huge prompt takes far longer than this).
settings.register_profile(
    "fuzz",
    max_examples=60,
    deadline=2000,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FUZZ = settings.get_profile("fuzz")


def assert_one_line(message: str) -> None:
    lines = [line for line in message.splitlines() if line.strip()]
    assert len(lines) == 1, message
    assert "Traceback" not in message, message


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def mode_of(path: Path) -> int:
    return os.lstat(path).st_mode & 0o7777
