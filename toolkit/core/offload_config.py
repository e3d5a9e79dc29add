"""The offload manager's settings, decided once at construction."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.errors import BadInput

FINE_STORE_PRIORITIES = ("low", "equal")
DISK_WRITE_POLICIES = ("write-back", "write-through", "reused-once")
DISK_GROUPS = ("all", "attention", "mamba")  # which KV cache groups' blocks the disk tier takes


@dataclass(frozen=True, kw_only=True)
class OffloadConfig:
    """Manager settings, decided once at construction.

    Attributes:
        num_cpu_blocks: CPU pool size in blocks, null block included (so `num_cpu_blocks - 1` are usable).
        lazy: store from the device free queue (blocks about to be evicted) instead of eagerly; turns
            fine-grained hits off (the geometry is rebuilt with `allow_fine_grained=False`).
        world_size: workers that must each report a store before its keys become hits.
        eviction_policy: "lru" (exactly vLLM's) or "slru" (scan-resistant).
        max_num_batched_tokens: the engine's per-step token budget (sizes the lazy watermark).
        handoff_retry_queue_blocks / handoff_retry_steps: bounded waiting room for hand-offs that find the pool
            full (0 disables, as in vLLM).
        num_remembered_evictions: evicted keys remembered to tell "evicted" from "never stored".
        enable_kv_events: keep KV-event payloads index-parallel with store batches and emit `CacheEvent`s.
        max_step_events: bound on undrained visualizer events (oldest dropped first); 0 records none, so the
            bookkeeping costs nothing where nobody calls `take_step_events` (the vLLM connector).
        diagnose_lookups: fill every lookup's per-group reach and reasons (`LookupResult.group_reach_tokens`,
            `group_miss_reasons`); the joint hit, the limiting group and the reason never need them. Off in the
            vLLM connector unless an observer turns it on (`manager.diagnose_lookups`).
        fine_store_priority: "low" (default): blocks stored only for fine-grained hits (prompt-tail blocks, Mamba
            states inside a scheduler block) are reused first until a lookup hits them, so they never displace
            block-aligned prefixes; "equal": they age like any other block (vLLM's SimpleCPU).
        speculative_block_drop: the engine drafts with an EAGLE-family drafter (EAGLE, EAGLE3, MTP) that builds a
            position's draft KV from the next token's hidden state: every full-attention group must hold one drop
            unit past a hit (a hash block when lookups are fine-grained and its block is larger, else its block),
            which the drafter then recomputes (vLLM's `use_eagle_block_drop`, docs/reference-behaviour.md).
        num_disk_blocks: a disk tier below the CPU pool, in blocks of the CPU pool's size (0: none, nothing
            changes). Blocks the CPU pool evicts are written back to it; lookups span both tiers, and a hit's
            disk-held blocks are promoted into CPU blocks and loaded from there (`toolkit.core.load.from_disk`).
        disk_write_policy: "write-back" (default): a block goes to disk when the CPU tier evicts it (fewest writes;
            what the CPU tier holds at a restart is lost); "write-through": also as soon as its store completes, so
            a restart finds every stored block on disk (more writes); "reused-once": on eviction, only blocks
            hit at least once while in the CPU tier (one-shot prompts never reach the disk: fewer writes, at the
            cost of a block's first reuse after its eviction).
        disk_groups: which groups' blocks go to disk: "all" (default), "attention" (every non-Mamba group) or
            "mamba". A hybrid hit needs every group at one boundary, so a group kept off the disk can only hit
            from host memory (measured: docs/results/2026-12-03-disk-tier.md).
    """

    num_cpu_blocks: int
    lazy: bool = False
    world_size: int = 1
    eviction_policy: str = "lru"
    max_num_batched_tokens: int = 8192
    handoff_retry_queue_blocks: int = 64
    handoff_retry_steps: int = 8
    num_remembered_evictions: int = 1 << 16
    enable_kv_events: bool = False
    max_step_events: int = 100_000
    diagnose_lookups: bool = True
    fine_store_priority: str = "low"
    speculative_block_drop: bool = False
    num_disk_blocks: int = 0
    disk_write_policy: str = "write-back"
    disk_groups: str = "all"

    def __post_init__(self) -> None:
        if self.fine_store_priority not in FINE_STORE_PRIORITIES:
            raise BadInput(
                f"fine_store_priority: {self.fine_store_priority!r} is not one of {', '.join(FINE_STORE_PRIORITIES)}"
            )
        for name in ("num_cpu_blocks", "world_size", "max_num_batched_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadInput(f"{name}: must be a positive integer, got {value!r}")
        if self.disk_write_policy not in DISK_WRITE_POLICIES:
            raise BadInput(
                f"disk_write_policy: {self.disk_write_policy!r} is not one of {', '.join(DISK_WRITE_POLICIES)}"
            )
        if self.disk_groups not in DISK_GROUPS:
            raise BadInput(f"disk_groups: {self.disk_groups!r} is not one of {', '.join(DISK_GROUPS)}")
        disk = self.num_disk_blocks
        if not isinstance(disk, int) or isinstance(disk, bool) or disk < 0:
            raise BadInput(f"num_disk_blocks: must be an integer >= 0, got {disk!r}")
