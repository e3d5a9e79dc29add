"""The one interface every engine implements (`Engine`), and the variants (connector configurations) they run.

An engine is built for one variant and runs phases on it, keeping its caches between phases:

    engine.describe() -> EngineFacts geometry and capacities (`facts.py`: block tokens, device and CPU-tier blocks
                                     and bytes, the groups where the engine sees them)
    engine.run_phase(phase, requests, progress=, concurrency=, after=) -> list[RequestRecord]
    engine.reset_device_cache()      drain the connector's pending stores, then reset the device prefix cache;
                                     raises ResetRefused if vLLM refuses (the hot phase would measure local hits)
    engine.close()

and, where the engine has them (defaults: none): `warm_up`, `clock` / `virtual_now_s` (the dry engine's virtual
time), `phase_extra` (the server's per-phase hit split), `switch_to` (the live engine's negative control).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence, overload

from toolkit.engines.facts import EngineFacts
from toolkit.engines.records import RequestRecord
from toolkit.errors import BadInput, RunFailed
from toolkit.workloads.traces import PromptBlocks

BASELINES = ("no_offload", "simplecpu", "no_fine_grained", "lazy", "fine_equal_priority")
POLICIES = ("eager", "lazy")
# The drafters an engine may model ("none": no speculative decoding); the harness builds vLLM's `SpeculativeConfig`.
SPECULATIVE_METHODS = ("ngram", "mtp")
DRAFTERS = ("none", *SPECULATIVE_METHODS)


class ResetRefused(RuntimeError, RunFailed):
    """vLLM refused to reset the device prefix cache (stores still in flight): the run is aborted."""


class LazyPrompt(Sequence[int]):
    """A prompt whose token ids are made when read (`list(prompt)`), so 10^5 queued requests hold no token lists.

    `len()` is free; iterating or indexing builds the list each time: read it once (`list(prompt)`) and keep that.
    """

    __slots__ = ("_make", "_num_tokens")

    def __init__(self, make: Callable[[], list[int]], num_tokens: int) -> None:
        self._make = make
        self._num_tokens = num_tokens

    def __len__(self) -> int:
        return self._num_tokens

    def tokens(self) -> list[int]:
        """A fresh list of the token ids (the caller owns it)."""
        return self._make()

    def blocks(self) -> PromptBlocks | None:
        """The prompt as whole blocks of ids (`traces.PromptBlocks`) where its maker knows them; None here."""
        return None

    def __iter__(self) -> Iterator[int]:
        return iter(self._make())

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self._make()[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(other) == self._num_tokens and list(self) == list(other)

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'LazyPrompt' (equal to any sequence of its tokens)")


@dataclass(frozen=True)
class PhaseRequest:
    request_id: str
    prompt_token_ids: Sequence[int]  # a list, or a LazyPrompt (engines read it with list() when they feed it)
    max_tokens: int
    arrival_s: float = 0.0  # from the phase start, on the engine's clock (the dry engine's virtual clock)
    # The orchestrator's KV hints for this request, as plain builtins (`toolkit.workloads.hints`); every engine
    # sends them as vLLM's `KvHintsEnvelope` (`toolkit.vllm.hints.to_envelope`). None: no hints.
    kv_hints: Mapping[str, Any] | None = None


def with_hints(requests: list[PhaseRequest], hints: Mapping[str, Mapping[str, Any]]) -> list[PhaseRequest]:
    """`requests` with each one's KV hints (`workloads.hints.synthesise_hints`; none: the list as it is)."""
    if not hints:
        return requests
    return [replace(r, kv_hints=hints[r.request_id]) if r.request_id in hints else r for r in requests]


@dataclass(frozen=True, kw_only=True)
class VariantSpec:
    """One connector configuration: `connector` is "toolkit", "simplecpu" (vLLM's own) or "none"."""

    name: str
    connector: str = "toolkit"
    policy: str = "eager"
    fine_grained: bool = True
    eviction: str = "slru"  # the connector's default; "lru" is vLLM's order
    corrupt_loads: bool = False  # negative control: loaded blocks are corrupted (live)
    fine_store_priority: str = "low"  # "equal": fine-grained-only stores age like any block (vLLM's SimpleCPU)

    def connector_extra_config(self, cpu_bytes: int) -> dict[str, Any]:
        """The variant's `kv_connector_extra_config` with a CPU tier of `cpu_bytes` (server-wide)."""
        from toolkit.vllm.transfer_config import variant_extra_config

        return variant_extra_config(
            self.connector,
            cpu_bytes=cpu_bytes,
            policy=self.policy,
            fine_grained=self.fine_grained,
            eviction=self.eviction,
            fine_store_priority=self.fine_store_priority,
            corrupt_loads=self.corrupt_loads,
        )

    def describe(self) -> dict[str, Any]:
        """What the variant runs, as its connector takes it: the toolkit's options; for vLLM's SimpleCPU the
        two it has (eager or lazy offload, LRU order, never fine-grained); for no connector, none."""
        out: dict[str, Any] = {"name": self.name, "connector": self.connector, "corrupt_loads": self.corrupt_loads}
        if self.connector == "toolkit":
            keys = ("policy", "fine_grained", "eviction", "fine_store_priority")
            return {**out, **{key: getattr(self, key) for key in keys}}
        if self.connector == "simplecpu":  # transfer_config.variant_extra_config: lazy_offload only
            lazy = self.policy == "lazy"
            return {**out, "policy": "lazy" if lazy else "eager", "fine_grained": False, "eviction": "lru"}
        return {**out, "policy": None, "fine_grained": False, "eviction": None}


def variants_for(
    *, policy: str, fine_grained: bool, eviction: str, baselines: tuple[str, ...], connector: str = "toolkit"
) -> list[VariantSpec]:
    """The main toolkit variant followed by the requested baselines (unknown names list the valid ones)."""
    if policy not in POLICIES:
        raise BadInput(f"policy: unknown policy {policy!r}; valid policies: {', '.join(POLICIES)}")
    for name in baselines:
        if name not in BASELINES:
            raise BadInput(f"baseline: unknown baseline {name!r}; valid baselines: {', '.join(BASELINES)}")
    main = VariantSpec(
        name=connector if connector != "toolkit" else "toolkit",
        connector=connector,
        policy=policy,
        fine_grained=fine_grained and policy == "eager",
        eviction=eviction,
    )
    out = [main]
    for name in dict.fromkeys(baselines):
        if name == main.name:
            continue  # the main variant already is this baseline (vLLM's own connector as main)
        if name == "no_offload":
            out.append(VariantSpec(name=name, connector="none"))
        elif name == "simplecpu":
            out.append(VariantSpec(name=name, connector="simplecpu"))
        elif name == "no_fine_grained":
            out.append(replace(main, name=name, fine_grained=False))
        elif name == "lazy":
            out.append(replace(main, name=name, policy="lazy", fine_grained=False))
        elif name == "fine_equal_priority":
            out.append(replace(main, name=name, fine_store_priority="equal"))
    return out


class Engine(abc.ABC):
    """What every engine (dry, live, server) is: the runner calls only these.

    The optional abilities have defaults that say "not this engine": no warm-up, no virtual clock, no extra phase
    columns, no switching of variant in place.
    """

    @abc.abstractmethod
    def describe(self) -> EngineFacts:
        """Geometry and capacities (`facts.EngineFacts`)."""

    @abc.abstractmethod
    def run_phase(
        self,
        phase: str,
        requests: list[PhaseRequest],
        *,
        progress: bool = False,
        concurrency: int | None = None,
        after: Mapping[str, str] | None = None,
    ) -> list[RequestRecord]:
        """Run `requests` (in trace order) as phase `phase`; one record per request, in the same order.

        `concurrency`: that many closed-loop clients (a phase without arrival times); `after`: each request's
        previous turn (`workloads.clients.previous_turns`), sent only once that turn finished."""

    @abc.abstractmethod
    def reset_device_cache(self, *, cpu_tier: bool = False) -> None:
        """Drain pending stores, then reset the device prefix cache; `ResetRefused` if vLLM refuses. `cpu_tier`:
        empty the connector's CPU tier too (vLLM's `reset_connector`), so the next phase starts from nothing."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the engine holds (an in-process vLLM, a harness); a server is left running."""

    def warm_up(self, prompt_tokens: int) -> RequestRecord | None:
        """One unrelated request of `prompt_tokens` tokens before the cold phase, then a reset; its record
        (phase "warmup") or None where the engine has no first-call costs to absorb."""
        return None

    @property
    def clock(self) -> Any | None:
        """The engine's virtual clock (`perfmodel.clock.VirtualClock`), None for engines timed by the wall."""
        return None

    def virtual_now_s(self) -> float | None:
        """The virtual clock's time (seconds), None for engines timed by the wall."""
        return None

    def phase_extra(self, phase: str) -> dict[str, Any]:
        """Columns of the phase row that the records cannot hold (the server's per-phase hit split)."""
        return {}

    def offload_manager(self) -> Any | None:
        """The toolkit connector's manager in this process, to subscribe to (`toolkit.core.observer`); None where
        there is none here (another connector; a server's, in the server's own process)."""
        return None

    def switch_to(self, spec: VariantSpec) -> None:
        """Run the next phases as `spec` on this engine (its caches kept); only engines that can say so."""
        raise NotImplementedError(f"{type(self).__name__} cannot switch variants in place; start a new engine")
