"""Worker side of the offload: region discovery, host mirrors, copy backends, completion tracking (imports torch).

Start at `OffloadWorker` (worker.py) and `TensorPlacement` (placement.py); the backend contract is documented
once on `CopyBackend` (backend.py). Never imports vllm: toolkit/vllm adapts vLLM's objects to these inputs.
"""

from toolkit.copy.backend import CopyBackend, InjectedCopyFault
from toolkit.copy.completion import CompletionTracker, CopyOutcome, CopyTimeout, Direction
from toolkit.copy.cpu_backend import CpuCopyBackend
from toolkit.copy.descriptors import RegionPair, build_descriptors, coalesce_runs
from toolkit.copy.faults import FaultInjector, FaultSpec
from toolkit.copy.host_mirror import HostMirror, HostMirrorSet, allocate_host_mirrors, num_host_blocks_for
from toolkit.copy.placement import TensorPlacement
from toolkit.copy.policy import BackendPolicy, PolicyRule, default_policy, parse_policy
from toolkit.copy.regions import CopyRegion, discover_regions, regions_from_tensors
from toolkit.copy.worker import OffloadWorker, WorkerConfig

__all__ = [
    "BackendPolicy",
    "CompletionTracker",
    "CopyBackend",
    "CopyOutcome",
    "CopyRegion",
    "CopyTimeout",
    "CpuCopyBackend",
    "Direction",
    "FaultInjector",
    "FaultSpec",
    "HostMirror",
    "HostMirrorSet",
    "InjectedCopyFault",
    "OffloadWorker",
    "PolicyRule",
    "RegionPair",
    "TensorPlacement",
    "WorkerConfig",
    "allocate_host_mirrors",
    "build_descriptors",
    "coalesce_runs",
    "default_policy",
    "discover_regions",
    "num_host_blocks_for",
    "parse_policy",
    "regions_from_tensors",
]
