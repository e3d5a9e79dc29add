"""Per-step inputs to the offload manager: plain data the engine adapter fills from its own objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Hashable, Iterator, Mapping, NamedTuple, Protocol, Sequence


class RequestView(Protocol):
    """What the manager reads from a request.

    - `num_computed_tokens`: tokens computed before this step (the engine advances it after the metadata is built).
    - `num_output_placeholders`: speculative/async placeholders not yet confirmed (subtracted from computed).
    - `block_hashes`: chained hashes at hash-block granularity; hash i covers tokens `[0, (i + 1) * hash_tokens)`.
    - `all_token_ids`: optional; only used for KV-event payloads.
    """

    @property
    def request_id(self) -> str: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def num_computed_tokens(self) -> int: ...

    @property
    def num_output_placeholders(self) -> int: ...

    @property
    def block_hashes(self) -> Sequence[Hashable]: ...


@dataclass
class SimpleRequest:
    """A mutable `RequestView` for tests, notebooks and benchmarks."""

    request_id: str
    num_tokens: int
    num_prompt_tokens: int
    block_hashes: Sequence[Hashable]
    num_computed_tokens: int = 0
    num_output_placeholders: int = 0
    all_token_ids: list[int] | None = None


class Handoff(NamedTuple):
    """A Mamba-align boundary state the engine published this step (the key is read from the block, not here)."""

    group_id: int
    device_block_id: int
    boundary_tokens: int


class ScheduledRequest(NamedTuple):
    """One request scheduled this step (immutable).

    `new_block_ids[g]`: device block ids appended to group g's table this step (the whole table when `resumed`).
    `resumed`: the request resumes after preemption; its previous table is gone.
    A named tuple rather than a frozen dataclass: adapters build one per scheduled request per step, and a frozen
    dataclass costs several times more to construct.
    """

    request: RequestView
    new_block_ids: Sequence[Sequence[int]]
    num_scheduled_tokens: int
    resumed: bool = False


class RunningColumns:
    """The already-running requests scheduled this step, in the engine's own column layout, read in place.

    `req_ids[i]` got `new_block_ids[i]` (per group, or None: no new block); `num_scheduled_tokens[req_id]`;
    `resumed_ids`: requests resuming after preemption (their `new_block_ids` are whole tables); `requests`: id ->
    `RequestView`. Most running requests have nothing to store in a step (a decode step, a chunk short of its next
    block end): with columns the manager skips each one after one comparison, no per-request object built.
    """

    __slots__ = ("req_ids", "new_block_ids", "num_scheduled_tokens", "resumed_ids", "requests")

    def __init__(
        self,
        req_ids: Sequence[str],
        new_block_ids: Sequence[Sequence[Sequence[int]] | None],
        num_scheduled_tokens: Mapping[str, int],
        resumed_ids: "set[str] | frozenset[str]",
        requests: Mapping[str, RequestView],
    ) -> None:
        self.req_ids = req_ids
        self.new_block_ids = new_block_ids
        self.num_scheduled_tokens = num_scheduled_tokens
        self.resumed_ids = resumed_ids
        self.requests = requests

    def __iter__(self) -> Iterator[ScheduledRequest]:
        """As `ScheduledRequest`s (readers that want them; the manager reads the columns)."""
        requests, counts, resumed = self.requests, self.num_scheduled_tokens, self.resumed_ids
        for req_id, new_ids in zip(self.req_ids, self.new_block_ids):
            request = requests.get(req_id)
            if request is not None:
                yield ScheduledRequest(
                    request, () if new_ids is None else new_ids, counts.get(req_id, 0), req_id in resumed
                )


# A hand-off as an engine may publish it: a `Handoff`, or any plain (group_id, device_block_id, boundary_tokens)
# triple in `Handoff`'s field order (vLLM's own entries are such tuples; the core only unpacks them positionally).
HandoffEntry = Handoff | tuple[int, int, int]


@dataclass(frozen=True, kw_only=True)
class StepInput:
    """Everything the manager needs to build one step's metadata.

    `scheduled`: requests scheduled this step as `ScheduledRequest`s; `running` (optional): more of them in the
    engine's column layout (`RunningColumns`; an adapter passes new requests in `scheduled` and running ones here).
    `finished_request_ids` / `preempted_request_ids`: requests that finished / were preempted in this scheduling
    pass (their hand-offs are dropped: their blocks may already be reused); any set-like container, read only.
    `handoffs`: per request, the boundary states drained from the engine this step, each a `HandoffEntry`
    (read-only: adapters pass the engine's own mapping through uncopied).
    """

    scheduled: Sequence[ScheduledRequest] = ()
    finished_request_ids: AbstractSet[str] = frozenset()
    preempted_request_ids: AbstractSet[str] = frozenset()
    handoffs: Mapping[str, Sequence[HandoffEntry]] = field(default_factory=dict)
    running: RunningColumns | None = None

    def computing_ids(self) -> set[str]:
        """The requests given tokens to compute this step (new and running)."""
        ids = {s.request.request_id for s in self.scheduled if s.num_scheduled_tokens}
        if self.running is not None:
            ids.update(r for r, n in self.running.num_scheduled_tokens.items() if n)
        return ids

    def all_scheduled(self) -> Iterator[ScheduledRequest]:
        """`scheduled` then `running`, every one as a `ScheduledRequest`."""
        yield from self.scheduled
        if self.running is not None:
            yield from self.running
