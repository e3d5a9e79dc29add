"""The checks on an experiment config's own values, made when a config is made and again by `validate()`: the names
from a fixed list, the ranges and caps (`toolkit.limits`), and the combinations the engines refuse. None reads a
file or the network; the checks that need the trace, a server or a model's layout are the run's plan's
(`plan_checks.py`, `preflight.py`, `capacity.py`). A bad value raises BadInput naming the field and the value.
"""

from __future__ import annotations

from toolkit import limits
from toolkit.core.offload_config import DISK_GROUPS, DISK_WRITE_POLICIES
from toolkit.engines.base import DRAFTERS, POLICIES
from toolkit.errors import BadInput
from toolkit.experiments.config_fields import (
    CONNECTORS,
    DISK_LOAD_RULES,
    DISK_PROFILES,
    ENGINES,
    FRESH_ENGINES,
    STORE_PROFILES,
    ConfigFields,
)
from toolkit.host_cpu import MODEL_DTYPES
from toolkit.workloads.phase_names import PHASES

MIN_STORE_GIB = 1 / 64  # the smallest shared store a run takes (16 MiB)


def check_fields(c: ConfigFields) -> None:
    """Every check on the values alone, in the order a user fixes them: names, then sizes, then combinations."""
    _check_names(c)
    _check_sizes(c)
    _check_engine(c)
    _check_store(c)
    _check_combinations(c)


def _check_names(c: ConfigFields) -> None:
    """The fields whose value comes from a fixed list."""
    lists = (
        ("engine", c.engine, ENGINES, "engine"),
        ("dtype", c.dtype, MODEL_DTYPES, "model dtype"),
        ("policy", c.variant.policy, POLICIES, "policy"),
        ("connector", c.variant.connector, CONNECTORS, "connector"),
        ("speculative", c.dry.speculative, DRAFTERS, "drafter"),
        ("disk_profile", c.dry.disk_profile, DISK_PROFILES, "disk profile"),
        ("disk_load_rule", c.dry.disk_load_rule, DISK_LOAD_RULES, "disk load rule"),
        ("disk_write_policy", c.dry.disk_write_policy, DISK_WRITE_POLICIES, "disk write policy"),
        ("disk_groups", c.dry.disk_groups, DISK_GROUPS, "disk placement"),
        ("store_profile", c.dry.store_profile, STORE_PROFILES, "store profile"),
    )
    for field, value, valid, what in lists:
        if value not in valid:
            raise BadInput(f"{field}: unknown {what} {value!r}; valid: {', '.join(valid)}")
    w = c.workload
    bad = [p for p in w.phases if p not in PHASES]
    if bad or not w.phases:
        raise BadInput(f"phases: unknown phase(s) {bad}; valid phases: {', '.join(PHASES)}")
    bad = [p for p in w.reset_before if p not in PHASES]
    if bad:
        raise BadInput(f"reset_before: unknown phase(s) {bad}; valid phases: {', '.join(PHASES)}")
    if not str(c.dry.gpu).endswith(".json"):  # a PROFILE.json from kvtk calibrate: the plan reads that file
        limits.check_name(c.dry.gpu, "gpu")  # it names a file of data/gpus/
    if c.out is not None and (not isinstance(c.out, str) or not c.out or "\0" in c.out):
        raise BadInput(f"out: must be a folder path, got {c.out!r}")


def _check_sizes(c: ConfigFields) -> None:
    """Finite sizes within the caps of `toolkit.limits`, counts >= 1."""
    w, d = c.workload, c.dry
    for value, name in ((c.cpu_gib, "cpu_gib"), (d.device_gib, "device_gib")):
        limits.check_optional_positive(value, name, limits.MAX_SIZE_GIB)
    limits.check_optional_positive(d.copy_gbps, "copy_gbps")
    limits.check_float(d.disk_gib, "disk_gib", 0.0, limits.MAX_SIZE_GIB)
    if w.max_requests is not None:
        limits.check_int(w.max_requests, "max_requests", 1, limits.MAX_TRACE_REQUESTS)
    limits.check_float(w.time_scale, "time_scale", 0.0, 1e9, min_open=True)
    limits.check_int(d.tp, "tp", 1, 1024)
    limits.check_int(d.dcp, "dcp", 1, 1024)
    limits.check_int(c.max_num_seqs, "max_num_seqs", 1, 1 << 16)
    if c.device_blocks is not None:
        limits.check_int(c.device_blocks, "device_blocks", 1, limits.MAX_DEVICE_BLOCKS)
    for value, name in ((d.window, "window"), (c.prefix_match_unit, "prefix_match_unit")):
        if value is not None:
            limits.check_int(value, name, 1, limits.MAX_MODEL_LEN)
    if w.pressure_prompt_tokens is not None:
        limits.check_int(w.pressure_prompt_tokens, "pressure_prompt_tokens", 1, limits.MAX_MODEL_LEN)
    if w.concurrency is not None and not (type(w.concurrency) is int and 1 <= w.concurrency <= 4096):
        raise BadInput(f"concurrency: must be 1..4096 clients, got {w.concurrency!r}")
    limits.check_float(w.pressure_evict_fraction, "pressure_evict_fraction", 0.0, 1.0)
    limits.check_float(c.live.logprob_tolerance, "logprob_tolerance", 0.0)
    limits.check_float(d.compute_efficiency, "compute_efficiency", 0.0, 1.0, min_open=True)


def _check_store(c: ConfigFields) -> None:
    """`--store`: the live engine's toolkit connector only; a mooncake:// URL or `local` with a bounded size."""
    store = c.live.store
    if store == "":
        _check_dry_store(c)
        return
    if c.engine != "live" or c.variant.connector != "toolkit":
        raise BadInput(f"store: only the toolkit connector of the live engine has a shared tier (engine {c.engine!r})")
    if store != "local":
        from toolkit.tiers.shared.config import parse_store_url

        try:
            parse_store_url(store if isinstance(store, str) else repr(store))
        except BadInput:
            raise BadInput(f"store: give mooncake://HOST:PORT or local, got {store!r:.60}") from None
        if c.live.store_gib is not None:  # sized by whoever started it: a size here would be silently ignored
            raise BadInput(
                f"store_gib: {c.live.store_gib!r} sizes only a store started for the run (--store local); "
                f"{store!r:.60} is sized by its own master"
            )
    if c.live.store_gib is not None:
        limits.check_float(c.live.store_gib, "store_gib", MIN_STORE_GIB, 1024.0)


def _check_dry_store(c: ConfigFields) -> None:
    """`--store-gib` without `--store`: the dry engine's modelled store, below its disk tier only."""
    gib = c.live.store_gib
    if gib is None:
        return
    if c.engine != "dry" or not c.dry.disk_gib:
        raise BadInput(
            f"store_gib: {gib!r} models a shared store below the dry engine's disk tier: give --disk-gib with "
            f"--engine dry (engine {c.engine!r}, disk_gib {c.dry.disk_gib!r}), or --store for the live engine"
        )
    limits.check_float(gib, "store_gib", MIN_STORE_GIB, limits.MAX_SIZE_GIB)


def _check_engine(c: ConfigFields) -> None:
    """The server engine and its URL go together."""
    url = c.live.url
    if (c.engine == "server") != (url is not None):
        raise BadInput(
            f"url: the server engine needs --url http://HOST:PORT and only it takes one "
            f"(engine {c.engine!r}, url {url!r})"
        )
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://")) and len(url) <= 2048):
        raise BadInput(f"url: an http:// or https:// base URL is needed, got {url!r}")
    if c.engine == "server" and c.variant.baselines:
        raise BadInput(
            f"baselines: a server is one variant (its own connector); start one server per "
            f"variant and run each (got baselines {list(c.variant.baselines)})"
        )
    if c.engine == "server" and c.workload.hints != "none":  # the send would drop them silently: refuse instead
        raise BadInput(
            f"hints: vLLM's OpenAI-compatible HTTP API carries no kv_hints, so a server run cannot send them "
            f"(hints {c.workload.hints!r}); use --engine dry or live"
        )


def _check_combinations(c: ConfigFields) -> None:
    w, d = c.workload, c.dry
    if c.engine in FRESH_ENGINES and w.phases[0] != "cold":
        raise BadInput(
            f"phases: {','.join(w.phases)} starts with {w.phases[0]}, but the {c.engine} engine starts every run "
            f"with empty caches, so nothing was stored for it to reuse ({w.phases[0]} would measure a cold run): "
            f"start with cold (--phases {','.join(['cold', *(p for p in w.phases if p != 'cold')])})"
        )
    if w.concurrency is not None and d.window is not None:
        raise BadInput(
            f"window/concurrency: the open-loop window ({d.window}) and closed-loop clients "
            f"({w.concurrency}) exclude each other; give one"
        )
    if d.speculative != "none" and c.engine != "dry":
        raise BadInput(f"speculative: only the dry engine models a drafter here (engine {c.engine!r})")
    if d.disk_gib and (c.engine not in ("dry", "live") or c.variant.connector != "toolkit"):
        raise BadInput(
            f"disk_gib: only the toolkit connector of the dry and live engines has a disk tier (engine {c.engine!r})"
        )
