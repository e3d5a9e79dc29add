"""`kv_connector_extra_config` of `HybridOffloadConnector`: parsed once, validated, unknown keys refused.

The options' documentation is `OPTION_DOCS` below; the table in docs/connector.md is generated from it and from
the defaults `parse_config({})` returns (`kvtk docs config`; a test checks the two agree), so edit it here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from toolkit.core.offload_config import DISK_GROUPS, DISK_WRITE_POLICIES
from toolkit.errors import BadInput

if TYPE_CHECKING:  # vLLM's type, for the reader (mypy sees it as Any: vLLM is not analysed)
    from vllm.v1.kv_cache_interface import KVCacheConfig

GIB = 1024**3
DEFAULT_CPU_BYTES = 8 * GIB
STORE_POLICIES = ("eager", "lazy")
EVICTION_POLICIES = ("lru", "slru", "lru+hints", "slru+hints")
DEFAULT_EVICTION_POLICY = "slru"  # replay-after-pressure hits vs Belady, dry engine: see docs/connector.md
COPY_BACKENDS = ("auto", "cpu", "cuda", "triton")
VALID_KEYS = (
    "cpu_bytes_to_use",
    "cpu_bytes_to_use_per_rank",
    "store_policy",
    "fine_grained",
    "eviction_policy",
    "fine_store_priority",
    "copy_backend",
    "copy_descriptors_per_call",
    "fault_injection",
    "stats_interval_s",
    "disk_bytes_to_use",
    "disk_path",
    "disk_write_policy",
    "disk_groups",
    "shared_store_url",
    "record_cache_state_path",
)
# Each option's value type and meaning, in VALID_KEYS order (the generated table's rows; Markdown allowed). The
# default column comes from `parse_config({})`; "default" here only names a default that is derived, not a value.
OPTION_DOCS: dict[str, dict[str, str]] = {
    "cpu_bytes_to_use": {
        "type": "int (bytes)",
        "meaning": "server-wide CPU tier budget, split evenly over `parallel_config.world_size`; refused at start "
        "when it holds fewer than two blocks per rank, or more than the host's `MemAvailable` (per rank times the "
        "ranks on the host)",
    },
    "cpu_bytes_to_use_per_rank": {
        "type": "int (bytes)",
        "default": "`cpu_bytes_to_use` / world size",
        "meaning": "overrides the per-rank budget",
    },
    "store_policy": {
        "type": '`"eager"` or `"lazy"`',
        "meaning": '`"eager"` stores blocks as they are computed; `"lazy"` stores blocks about to be evicted '
        "(block-aligned hits only: it forces `fine_grained` off)",
    },
    "fine_grained": {
        "type": 'bool, or `"on"`/`"off"`',
        "meaning": "hash-aligned hits inside hybrid blocks where vLLM allows them (needs a `prefix_match_unit` "
        "smaller than the hybrid block)",
    },
    "eviction_policy": {
        "type": '`"slru"`, `"lru"`, `"slru+hints"` or `"lru+hints"`',
        "meaning": 'CPU tier eviction: `"slru"` (segmented LRU, scan resistant; the default by measurement) or '
        "`\"lru\"` (vLLM's order: use it to compare with vLLM's SimpleCPU); `+hints`: the orchestrator's KV hints "
        "(`request.kv_hints`, schema in toolkit/core/hints/schema.py) retain or release sessions' blocks",
    },
    "fine_store_priority": {
        "type": '`"low"` or `"equal"`',
        "meaning": '`"low"`: blocks stored only for fine-grained hits (prompt-tail blocks, Mamba states inside a '
        "scheduler block) are evicted first until a lookup hits them, so they never displace block-aligned "
        'prefixes; `"equal"`: they age like any block (vLLM\'s SimpleCPU)',
    },
    "copy_backend": {
        "type": '`"auto"`, `"cpu"`, `"cuda"` or `"triton"`',
        "meaning": '`"auto"`: the copy policy picks per batch (on CUDA the worker times its backends at start; the '
        'Triton kernel only for 512+ descriptors under 28 KiB, where it beat the DMA on an H200); `"cpu"`: host '
        'copies (the native copy library, or torch with `KVTK_NO_NATIVE=1`); `"cuda"`: batched DMA, enqueued in '
        'calls of 64-256 descriptors; `"triton"`: gather/scatter kernels',
    },
    "copy_descriptors_per_call": {
        "type": "int (descriptors, >= 0)",
        "meaning": "CUDA batched DMA: descriptors per `cuMemcpyBatchAsync` call; `0`: a sixteenth of the batch, "
        "64-256 (measured on an H200: one call of thousands stalls host-to-device copies on the driver's enqueue). "
        "Another GPU or driver: time it with `kvtk bench dma-shape`",
    },
    "fault_injection": {
        "type": "str",
        "meaning": 'testing only, `toolkit.copy.faults` syntax: `"load:every=1"` (every load fails: recomputed), '
        '`"corrupt:every=1"` (loaded blocks come back corrupted), `"store:0.5,seed=7"`, late copies '
        '`"late_load:0.1,delay_s=0.05"` or `"late_store:..."` (CPU backend), one rank only '
        '`"load:every=1,rank=1"`',
    },
    "stats_interval_s": {
        "type": "float (seconds, >= 0)",
        "meaning": "connector stats go to vLLM's stats hook at most this often (and after the last running request "
        "finished); counters accumulate in between, nothing is lost; `0`: every step",
    },
    "disk_bytes_to_use": {
        "type": "int (bytes, >= 0)",
        "default": "`0` (no disk tier)",
        "meaning": "server-wide disk tier below the CPU tier, split evenly over `parallel_config.world_size` "
        "(payload bytes; each block's slot adds a 4 KiB header): blocks the CPU tier evicts are written to it, "
        "lookups span both tiers and a hit's disk blocks are read back into CPU blocks before its load; needs "
        "`disk_path` in the live engine (the dry engine only models its time); `0`: none",
    },
    "disk_path": {
        "type": "str (a folder)",
        "default": '`""` (none)',
        "meaning": "where the disk tier keeps one store per rank (`rank-<r>/`, created owner-only); a store of the "
        "same cache identity is reused after a restart (with vLLM's default `sha256` block hashes; under "
        "`xxhash` vLLM seeds them at random per process unless `PYTHONHASHSEED` is set, and a restart then misses), "
        "any other is discarded with one log line naming the field",
    },
    "disk_write_policy": {
        "type": '`"write-back"`, `"write-through"` or `"reused-once"`',
        "meaning": '`"write-back"`: a block goes to disk when the CPU tier evicts it (fewest writes; what the CPU '
        'tier holds at a restart is lost); `"write-through"`: also as soon as its store completes, so a restart '
        'finds every stored block on disk (more writes); `"reused-once"`: on eviction, only blocks hit while in the '
        "CPU tier (fewer writes; a block's first reuse after eviction misses)",
    },
    "disk_groups": {
        "type": '`"all"`, `"attention"` or `"mamba"`',
        "meaning": "which KV cache groups' blocks go to disk (the others stay in host memory only): a hybrid hit "
        'needs every group at one boundary, so `"all"` (the default) is the one that hits from disk after an '
        "eviction ([measured](results/2026-12-03-disk-tier.md))",
    },
    "shared_store_url": {
        "type": 'str (`"mooncake://HOST:PORT"`, the master\'s RPC address)',
        "default": '`""` (none)',
        "meaning": "a Mooncake Store shared by engines, below the CPU tier (`disk_bytes_to_use`: how much of it "
        "this engine indexes) or, with `disk_path`, below the disk: CPU -> disk -> shared, writes to both, reads "
        "from the disk then the store, `disk_bytes_to_use` sizes the disk; lookups ask the store for a request's "
        "keys past what the local tiers hold (the request waits a step or two); `disk_write_policy` defaults to "
        '`"write-through"` with the store alone, so other engines see blocks at once (`"write-back"` with a disk)',
    },
    "record_cache_state_path": {
        "type": "str (file path)",
        "default": '`""` (none)',
        "meaning": "the scheduler-role connector writes the cache-state visualizer's recording of its CPU tier "
        "here (owner-only, rewritten as it grows, bounded at 1,000 steps and 8 MiB; `kvtk serve "
        "--record-cache-state PATH`); a path that cannot be written is one log line and no recording",
    },
}
FINE_STORE_PRIORITIES = ("low", "equal")
DEFAULT_STATS_INTERVAL_S = 1.0
# `KVTransferConfig` (kv_connector, kv_connector_module_path) of each connector the tools run; "none": no connector.
CONNECTORS = {
    "toolkit": ("HybridOffloadConnector", "toolkit.vllm"),
    "simplecpu": ("SimpleCPUReferenceConnector", "toolkit.vllm.reference"),
    "none": None,
}


@dataclass(frozen=True)
class ConnectorConfig:
    cpu_bytes_per_rank: int
    store_policy: str = "eager"
    fine_grained: bool = True
    eviction_policy: str = DEFAULT_EVICTION_POLICY
    fine_store_priority: str = "low"
    copy_backend: str = "auto"
    copy_descriptors_per_call: int = 0  # 0: the DMA backend's own rule (toolkit/copy/cuda_backend.py)
    fault_injection: str = ""
    stats_interval_s: float = DEFAULT_STATS_INTERVAL_S
    disk_bytes_per_rank: int = 0
    disk_path: str = ""
    disk_write_policy: str = "write-back"
    disk_groups: str = "all"
    shared_store_master: str = ""  # `host:port` of the shared store's master (`shared_store_url`); "": none
    record_cache_state_path: str = ""

    @property
    def lazy(self) -> bool:
        return self.store_policy == "lazy"


def parse_config(extra: Mapping[str, Any] | None, *, world_size: int = 1) -> ConnectorConfig:
    """Validate `kv_connector_extra_config`; every error names the key and the value."""
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(VALID_KEYS))
    if unknown:
        raise BadInput(f"kv_connector_extra_config: unknown key(s) {unknown}; valid keys: {', '.join(VALID_KEYS)}")
    total = _positive_int("cpu_bytes_to_use", extra.get("cpu_bytes_to_use", DEFAULT_CPU_BYTES))
    per_rank = total // max(1, world_size)
    if "cpu_bytes_to_use_per_rank" in extra:
        per_rank = _positive_int("cpu_bytes_to_use_per_rank", extra["cpu_bytes_to_use_per_rank"])
    return ConnectorConfig(
        cpu_bytes_per_rank=per_rank,
        store_policy=_choice("store_policy", extra.get("store_policy", "eager"), STORE_POLICIES),
        fine_grained=_switch("fine_grained", extra.get("fine_grained", True)),
        eviction_policy=_choice(
            "eviction_policy", extra.get("eviction_policy", DEFAULT_EVICTION_POLICY), EVICTION_POLICIES
        ),
        fine_store_priority=_choice(
            "fine_store_priority", extra.get("fine_store_priority", "low"), FINE_STORE_PRIORITIES
        ),
        copy_backend=_choice("copy_backend", extra.get("copy_backend", "auto"), COPY_BACKENDS),
        copy_descriptors_per_call=_count("copy_descriptors_per_call", extra.get("copy_descriptors_per_call", 0)),
        fault_injection=_faults(extra.get("fault_injection", "")),
        stats_interval_s=_seconds("stats_interval_s", extra.get("stats_interval_s", DEFAULT_STATS_INTERVAL_S)),
        disk_bytes_per_rank=_disk_bytes(extra.get("disk_bytes_to_use", 0)) // max(1, world_size),
        disk_path=_folder("disk_path", extra.get("disk_path", "")),
        disk_write_policy=_choice(
            "disk_write_policy", extra.get("disk_write_policy", _default_write_policy(extra)), DISK_WRITE_POLICIES
        ),
        disk_groups=_choice("disk_groups", extra.get("disk_groups", "all"), DISK_GROUPS),
        shared_store_master=_shared_store(extra),
        record_cache_state_path=_folder("record_cache_state_path", extra.get("record_cache_state_path", "")),
    )


def _shared_store(extra: Mapping[str, Any]) -> str:
    """`shared_store_url` -> the master's `host:port` ("" without one); refused in one line without a size. With
    `disk_path` too, the store is below the disk (CPU -> disk -> shared, toolkit/tiers/cascade.py)."""
    url = extra.get("shared_store_url", "")
    if url == "":
        return ""
    from toolkit.tiers.shared.config import parse_store_url

    try:
        master = parse_store_url(url if isinstance(url, str) else repr(url))
    except BadInput:
        raise BadInput(
            f"kv_connector_extra_config.shared_store_url: give mooncake://HOST:PORT, got {url!r:.60}"
        ) from None
    if not extra.get("disk_bytes_to_use"):
        raise BadInput("kv_connector_extra_config.disk_bytes_to_use: required with shared_store_url (the bytes of "
                       "the store this engine indexes)")  # fmt: skip
    return master


def _default_write_policy(extra: Mapping[str, Any]) -> str:
    """Write-through to a shared store alone (other engines see a block as soon as it was computed); write-back with
    a disk, the store below it included (the disk's fewest writes; the store gets what the disk gets)."""
    return "write-through" if extra.get("shared_store_url") and not extra.get("disk_path") else "write-back"


def _folder(key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > 4096 or "\0" in value:
        raise BadInput(f"kv_connector_extra_config.{key}: expected a path (a string), got {value!r:.80}")
    return value


def _disk_bytes(value: Any) -> int:
    return 0 if value == 0 and not isinstance(value, bool) else _positive_int("disk_bytes_to_use", value)


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise BadInput(f"kv_connector_extra_config.{key}: expected a positive number of bytes, got {value!r}")
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
    except (TypeError, ValueError):
        number = None
    if number is None or number <= 0:
        raise BadInput(f"kv_connector_extra_config.{key}: expected a positive number of bytes, got {value!r}")
    return number


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(f"kv_connector_extra_config.{key}: expected a whole number >= 0, got {value!r}")
    return value


def _seconds(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise BadInput(f"kv_connector_extra_config.{key}: expected a number of seconds >= 0, got {value!r}")
    return float(value)


def _choice(key: str, value: Any, valid: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in valid:
        raise BadInput(f"kv_connector_extra_config.{key}: {value!r} is not one of {', '.join(valid)}")
    return value.lower()


def _switch(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("on", "off", "true", "false"):
        return value.lower() in ("on", "true")
    raise BadInput(f"kv_connector_extra_config.{key}: {value!r} is not true/false or on/off")


def _faults(value: Any) -> str:
    if not isinstance(value, str):
        raise BadInput(
            f"kv_connector_extra_config.fault_injection: expected a string like 'load:every=1', got {value!r}"
        )
    try:
        from toolkit.copy.faults import FaultSpec
    except ImportError:  # the copy package is optional for scheduler-only use
        return value
    try:
        FaultSpec.parse(value)
    except ValueError as exc:
        raise BadInput(f"kv_connector_extra_config.fault_injection: {value!r}: {exc}") from None
    return value


MEMINFO_PATH = "/proc/meminfo"


def available_host_bytes(meminfo_path: str = MEMINFO_PATH) -> int | None:
    """Memory the host can hand out now without swapping (Linux `MemAvailable`); None where it cannot be read."""
    try:
        with open(meminfo_path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_host_memory(cpu_bytes_per_rank: int, ranks_on_host: int, available_bytes: int | None) -> None:
    """Refuse, at start, a CPU tier the host cannot hold: its mirrors are written in full when allocated, so an
    oversized budget would otherwise end in an out-of-memory kill mid-start or later, far from its cause."""
    if available_bytes is None:
        return  # not Linux, or /proc hidden: nothing to check against
    needed = cpu_bytes_per_rank * max(1, ranks_on_host)
    if needed > available_bytes:
        raise BadInput(
            f"kv_connector_extra_config.cpu_bytes_to_use: {cpu_bytes_per_rank} bytes per rank x {ranks_on_host} "
            f"rank(s) on this host = {needed / GIB:.2f} GiB, but only {available_bytes / GIB:.2f} GiB of host memory "
            f"is available (MemAvailable); lower cpu_bytes_to_use (or cpu_bytes_to_use_per_rank)"
        )


def host_blocks_for(kv_cache_config: KVCacheConfig, cpu_bytes_per_rank: int) -> int:
    """CPU pool size in blocks (null block 0 included), identical on the scheduler and every worker.

    One block id owns one row in every distinct region of the backing allocation, whose size is
    `kv_cache_tensors[0].size` (vLLM places every tensor inside one allocation).
    """
    total = max(t.size + t.offset for t in kv_cache_config.kv_cache_tensors)
    block_bytes: int = max(1, total // kv_cache_config.num_blocks)
    blocks = cpu_bytes_per_rank // block_bytes
    if blocks < 2:
        raise BadInput(
            f"kv_connector_extra_config.cpu_bytes_to_use: {cpu_bytes_per_rank} bytes per rank hold {blocks} block(s) "
            f"of {block_bytes} bytes; the minimum is {2 * block_bytes} bytes per rank (one usable block plus the null block)"
        )
    return blocks
