"""What one harness step did, read from vLLM's `SchedulerOutput` for the virtual clock: tokens and context per
request, who samples, which loads the connector submitted (bytes), and whether the step was *quiet* (decode only,
nothing moved: `decode_stretch.py` may then advance the following steps without the scheduler)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Mapping

from toolkit.perfmodel.step_time import ScheduledWork

if TYPE_CHECKING:
    from toolkit.engines.harness import Harness
    from toolkit.vllm.messages import HybridConnectorMetadata


class StepHook:
    """Records each step's work (tokens, context, sampling, loads) from the harness's step listener, called with
    the step's `SchedulerOutput` right after `schedule()`."""

    def __init__(
        self, harness: Harness, block_bytes: int, *, disk_load_blocks: Callable[[], dict[str, int]] | None = None
    ) -> None:
        """`disk_load_blocks()`: per request, the disk-tier blocks of the loads planned since the last call (None:
        no disk tier); their bytes are `take_disk_loads`."""
        self._harness = harness
        self._block_bytes = block_bytes
        self._disk_load_blocks = disk_load_blocks
        self._disk_loads: dict[str, int] = {}
        self._last: tuple[list[tuple[str, ScheduledWork]], dict[str, int]] = ([], {})
        # The last step was decode only and moved nothing (`decode_stretch.py` may skip the next ones).
        self.quiet = False
        self.num_scheduled = 0
        harness.step_listeners.append(self.on_scheduled)

    def on_scheduled(self, output: Any) -> None:
        harness = self._harness
        work = scheduled_work(output, harness.scheduler.requests)
        decode_only = all(w.new_tokens == 1 and w.samples for _, w in work)
        meta = output.kv_connector_metadata
        loads: dict[str, int] = {}
        if meta is not None:
            block_bytes = self._block_bytes
            # The harness read the step's loads just before calling its listeners.
            loads = {r: len(pairs) * block_bytes for r, pairs in harness.loaded_pairs_last_step.items() if pairs}
            take_disk = self._disk_load_blocks
            if take_disk is not None:
                self._disk_loads = {r: n * block_bytes for r, n in take_disk().items() if r in loads}
        self.quiet = (
            bool(work)
            and decode_only
            and not loads
            and _moves_nothing(meta)
            and not output.finished_req_ids
            and not output.preempted_req_ids
        )
        self.num_scheduled = len(work)
        self._last = (work, loads)

    def take(self) -> tuple[list[tuple[str, ScheduledWork]], dict[str, int]]:
        last, self._last = self._last, ([], {})
        return last

    def take_disk_loads(self) -> dict[str, int]:
        """The last step's loads' bytes read from the disk tier first, per request (empty without one)."""
        disk, self._disk_loads = self._disk_loads, {}
        return disk


@functools.cache
def _metadata_classes() -> tuple[type[HybridConnectorMetadata], Any]:
    """The toolkit's and vLLM's SimpleCPU step metadata classes, imported at the first step (this module loads
    without vLLM) and kept: the check runs every engine step."""
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata

    from toolkit.vllm.messages import HybridConnectorMetadata

    return HybridConnectorMetadata, SimpleCPUOffloadMetadata


def _moves_nothing(meta: Any) -> bool:
    """True when a step's connector metadata carries no load, store, decline or flush (either connector)."""
    if meta is None:
        return True
    HybridConnectorMetadata, SimpleCPUOffloadMetadata = _metadata_classes()
    if isinstance(meta, HybridConnectorMetadata):
        step = meta.step
        return bool(
            step.load is None
            and step.store is None
            and not step.load_event_to_req_ids
            and not step.need_flush
            and not meta.declined_req_ids
        )
    if isinstance(meta, SimpleCPUOffloadMetadata):
        return bool(meta.load_event < 0 and meta.store_event < 0)
    return False  # a connector this check does not know: never skip


def scheduled_work(output: Any, requests: Mapping[str, Any]) -> list[tuple[str, ScheduledWork]]:
    """Each scheduled request's id and share of a step, from vLLM's `SchedulerOutput`: the dry engine's clock and
    the live engine's step log read steps the same way."""
    work = []
    for req_id, num_new in output.num_scheduled_tokens.items():
        request = requests[req_id]
        # schedule() has already advanced num_computed_tokens by the step's tokens.
        computed = request.num_computed_tokens
        work.append((req_id, ScheduledWork(num_new, computed - num_new, computed >= request.num_tokens)))
    return work
