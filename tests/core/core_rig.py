"""A small rig for narrated scenario tests: one geometry, a device-pool model, the manager, and request helpers."""

from __future__ import annotations

from toolkit.core import (
    BlockKey,
    DeviceBlockPoolModel,
    Handoff,
    HybridGeometry,
    OffloadConfig,
    OffloadManager,
    ScheduledRequest,
    SimpleRequest,
    StepInput,
    parse_groups_spec,
)
from toolkit.core.sim import chain_hashes


class Rig:
    def __init__(
        self,
        groups: str = "full_attention:16",
        *,
        cpu_blocks: int = 9,
        gpu_blocks: int = 64,
        dcp: int = 1,
        hash_block_tokens: int | None = None,
        **config,
    ) -> None:
        self.geo = HybridGeometry(groups=parse_groups_spec(groups), dcp=dcp, hash_block_tokens=hash_block_tokens)
        self.device = DeviceBlockPoolModel(gpu_blocks)
        self.mgr = OffloadManager(
            geometry=self.geo, device_pool=self.device, config=OffloadConfig(num_cpu_blocks=cpu_blocks, **config)
        )
        self.geo = self.mgr.geometry  # lazy mode rebuilds it without fine-grained hits

    # ----- requests -------------------------------------------------------------------------------------------

    def request(self, request_id: str, num_tokens: int, *, seed: int = 0):
        tokens = [seed * 1_000_003 + i for i in range(num_tokens)]
        hashes = chain_hashes(tokens, self.geo.hash_tokens)
        return SimpleRequest(
            request_id=request_id,
            num_tokens=num_tokens,
            num_prompt_tokens=num_tokens,
            block_hashes=hashes,
            all_token_ids=tokens,
        )

    def allocate(self, num_tokens: int) -> list[list[int]]:
        """Device tables per group covering `num_tokens` (Mamba align: null entries, the last one real)."""
        tables = []
        for group, block in zip(self.geo.groups, self.geo.group_block_tokens):
            count = -(-num_tokens // block)
            if group.kind.value == "mamba_align":
                tables.append([0] * (count - 1) + self.device.allocate(1) if count else [])
            else:
                tables.append(self.device.allocate(count))
        return tables

    def hash_blocks(self, req: SimpleRequest, tables, end_tokens: int, *, groups=None) -> None:
        """Register the keys the engine's prefix cache would give the full blocks below `end_tokens`."""
        for group_id, block in enumerate(self.geo.group_block_tokens):
            if groups is not None and group_id not in groups:
                continue
            if self.geo.groups[group_id].kind.value == "mamba_align":
                continue
            for index in range(min(end_tokens, len(req.block_hashes) * self.geo.hash_tokens) // block):
                device_id = tables[group_id][index]
                if device_id and self.device.primary_key(device_id) is None:
                    self.device.cache_block(device_id, self.key(req, group_id, (index + 1) * block))

    def key(self, req: SimpleRequest, group_id: int, end_tokens: int) -> BlockKey:
        return BlockKey(group_id, req.block_hashes[end_tokens // self.geo.hash_tokens - 1])

    # ----- steps ----------------------------------------------------------------------------------------------

    def step(self, *scheduled, handoffs=None, finished=(), preempted=()):
        """`scheduled`: (request, new_block_ids per group, num_scheduled_tokens[, resumed]) tuples."""
        items = tuple(
            ScheduledRequest(
                request=s[0],
                new_block_ids=tuple(tuple(t) for t in s[1]),
                num_scheduled_tokens=s[2],
                resumed=s[3] if len(s) > 3 else False,
            )
            for s in scheduled
        )
        handoffs = {rid: [Handoff(*h) for h in hs] for rid, hs in (handoffs or {}).items()}
        return self.mgr.build_step(
            StepInput(
                scheduled=items,
                handoffs=handoffs,
                finished_request_ids=frozenset(finished),
                preempted_request_ids=frozenset(preempted),
            )
        )

    def complete(self, meta) -> None:
        if meta.store is not None:
            self.mgr.complete_stores({meta.store.event_id: self.mgr.config.world_size})
        if meta.load is not None:
            self.mgr.complete_loads(meta.load_event_to_req_ids[meta.load.event_id])

    def store_prompt(self, req: SimpleRequest, *, complete: bool = True):
        """Run a whole prompt in one chunk, then one empty step that stores its confirmed blocks."""
        tables = self.allocate(req.num_tokens)
        self.mgr.prepare_load(req, tables, 0)
        self.step((req, tables, req.num_tokens))
        req.num_computed_tokens = req.num_tokens
        self.hash_blocks(req, tables, req.num_tokens)
        meta = self.step((req, [[] for _ in tables], 1))
        if complete:
            self.complete(meta)
        return tables, meta

    def finish(self, req: SimpleRequest, tables) -> None:
        self.mgr.request_finished(req, tables)
        owned = [b for t in tables for b in t if b]
        self.device.free(owned)
