"""Scheduler-side core: pure Python, no torch, no vllm. See `geometry.py` for the glossary."""

from toolkit.core.geometry import FineGrainedVerdict, GroupLoadPlan, HybridGeometry
from toolkit.core.specs import CacheGroupSpec, GroupKind, parse_groups_spec

__all__ = [
    "CacheGroupSpec",
    "FineGrainedVerdict",
    "GroupKind",
    "GroupLoadPlan",
    "HybridGeometry",
    "parse_groups_spec",
]
