"""The configuration's fields, without its behaviour: the top-level fields and the four sections, the names the
engines and phases take, and which section each flat name belongs to. Below both `config.py` (the config: made,
read, checked) and `config_params.py` (flat parameters -> field values), which both read it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from toolkit.workloads.phase_names import PHASES

ENGINES = ("dry", "live", "server")
# The engines that start empty for every run: a first phase other than cold would measure nothing stored.
FRESH_ENGINES = ("dry", "live")
# The main variant's connector: the toolkit's, or vLLM's own CPU offload ("simplecpu") as the main variant.
CONNECTORS = ("toolkit", "simplecpu")


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions:
    trace: str = "fewshot-small"  # committed trace name, .jsonl path or generator spec
    max_requests: int | None = None  # the trace's first N requests (None: all)
    time_scale: float = 1.0  # arrival times divided by this (2: requests arrive twice as fast)
    concurrency: int | None = None  # closed loop: N clients, each turn after its previous (clients.py)
    phases: tuple[str, ...] = PHASES
    reset_before: tuple[str, ...] = ("hot", "replay")
    pressure_evict_fraction: float = 0.5  # share of the trace's CPU footprint the pressure traffic displaces
    pressure_prompt_tokens: int | None = None
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class VariantOptions:
    policy: str = "eager"
    fine_grained: bool = True
    eviction: str = "slru"  # the connector's default (toolkit/vllm/config.py DEFAULT_EVICTION_POLICY)
    connector: str = "toolkit"  # the main variant's connector ("simplecpu" runs vLLM's own as main)
    baselines: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DryOptions:
    gpu: str = "h200"  # the step-time model's GPU profile (data/gpus/, or a PROFILE.json of kvtk calibrate)
    compute_efficiency: float = 0.5  # achieved / peak FLOP/s in the step-time model
    copy_gbps: float | None = None  # host<->device copy rate, GB/s (None: the profile's PCIe x 0.8)
    window: int | None = None  # requests in flight at most (None: the engine's default)
    device_gib: float | None = None  # model presets: KV-cache GiB per rank (sets the device blocks)
    tp: int = 1  # model presets: tensor-parallel size (page bytes, CPU split)
    dcp: int = 1  # model presets: decode-context-parallel size
    speculative: str = "none"  # the engine's drafter: none, ngram or mtp (EAGLE family: drops a hit's last block)


@dataclass(frozen=True, kw_only=True)
class LiveOptions:
    negative_control: bool = True  # also run hot with corrupted loads
    warmup: bool = True  # one unrelated prompt (longest trace length) before the phases
    logprob_tolerance: float = 1e-2  # stated tolerance where bit-exactness does not hold
    url: str | None = None  # server: a running vLLM server's base URL (http://HOST:PORT)


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

    engine: str = "dry"
    model: str = "tiny-qwen3-next"
    dtype: str = "auto"  # tiny models' dtype (live; dry page sizes); auto = host_cpu.live_model_dtype
    cpu_gib: float | None = None  # None: enough for every prompt block of the trace, twice over
    device_blocks: int | None = None  # device KV cache blocks (None: the engine's default)
    prefix_match_unit: int | None = None  # vLLM's hash unit; None = its default. Not given: see __init__
    max_num_seqs: int = 16
    out: str | None = None  # run folder (None: runs/<time>-<engine>-<trace>)
    progress: bool = False
