"""Hybrid block geometry: per-group block sizes, the hash block, the scheduler block and fine-grained eligibility.

Glossary (used across the toolkit):

- **hash block**: the prefix-match unit; request hashes are chained every `hash_block_tokens` tokens.
- **group block**: one cache group's resolved physical block, in tokens (full attention and MLA times DCP).
- **scheduler block**: the LCM of all group blocks; a local prefix must end on one before an external hit starts.
- **boundary**: a token count at which a prefix hit ends; every group must hold state for the same boundary.
- **fine-grained hit**: a hit whose length is a multiple of the hash block rather than of the scheduler block.
- **hand-off**: a Mamba `align` state block the engine publishes at an exact boundary, stored in the step it arrives.
- **tail**: the full-attention block holding the last hash boundary of a prompt that ends inside the block.

Rules follow vLLM's SimpleCPU connector (docs/reference-behaviour.md, "Block sizes and DCP").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from toolkit.core.specs import CacheGroupSpec, GroupKind
from toolkit.errors import BadInput

# The CPU tier's smallest budget, the one formula every check states: each rank's pool holds at least one usable
# block plus block 0, which (as in vLLM's pools) is the null block and never holds data.
MIN_CPU_BLOCKS_PER_RANK = 2


def min_cpu_tier_bytes(block_bytes: int, world_size: int = 1) -> int:
    """The smallest server-wide CPU budget: `MIN_CPU_BLOCKS_PER_RANK` blocks on each of `world_size` ranks."""
    return MIN_CPU_BLOCKS_PER_RANK * block_bytes * world_size


def cpu_tier_too_small(field_name: str, cpu_bytes: int, block_bytes: int, world_size: int = 1) -> str:
    """The one line for a CPU budget under `min_cpu_tier_bytes`, in bytes, GiB and blocks."""
    per_rank_blocks = cpu_bytes // world_size // block_bytes
    least = min_cpu_tier_bytes(block_bytes, world_size)
    return (
        f"{field_name}: {cpu_bytes} bytes ({cpu_bytes / 2**30:.4g} GiB) over {world_size} rank(s) hold "
        f"{per_rank_blocks} block(s) of {block_bytes} bytes per rank; the minimum is {least} bytes "
        f"({least / 2**30:.4g} GiB): {MIN_CPU_BLOCKS_PER_RANK} blocks per rank (one usable plus the null block) "
        f"x {world_size} rank(s)"
    )


@dataclass(frozen=True)
class FineGrainedVerdict:
    """Whether hash-aligned (fine-grained) hits are possible, and if not, why and because of which groups."""

    enabled: bool
    reason: str
    blocking_group_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GroupLoadPlan:
    """How one group serves an external hit of `external_tokens` after a local prefix of `local_tokens`.

    `num_blocks` positions starting at device position `gpu_start_index` are paired with the CPU hit; only
    `num_real_blocks` of them carry data (windowed and Mamba hit lists are null-padded).
    """

    group_id: int
    num_blocks: int
    gpu_start_index: int
    num_real_blocks: int
    bytes: int


@dataclass(frozen=True, kw_only=True)
class HybridGeometry:
    """The block geometry of one model's KV cache on one rank.

    Attributes:
        groups: the cache groups, in the engine's group order.
        dcp: decode-context-parallel size (scales full attention and MLA blocks only).
        pcp: prefill-context-parallel size; only 1 is supported.
        hash_block_tokens: the prefix-match unit; None means vLLM's default, the GCD of the group blocks.
        allow_fine_grained: False under the lazy store policy, which cannot produce hash-aligned boundaries.
    """

    groups: tuple[CacheGroupSpec, ...]
    dcp: int = 1
    pcp: int = 1
    hash_block_tokens: int | None = None
    allow_fine_grained: bool = True
    _resolved_hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        if not self.groups:
            raise BadInput("groups: a geometry needs at least one cache group, got none")
        for name in ("dcp", "pcp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BadInput(f"{name}: must be a positive integer, got {value!r}")
        if self.pcp != 1:
            raise BadInput(
                f"pcp: prefill context parallelism is not supported by CPU offload (got pcp={self.pcp}); use pcp=1"
            )
        if self.dcp > 1:
            windowed = [g.label for g in self.groups if g.kind.is_windowed]
            if windowed:
                raise BadInput(
                    f"dcp: DCP={self.dcp} is not supported with windowed groups {windowed}; "
                    "with DCP > 1 only full attention, MLA and Mamba groups are allowed"
                )
        blocks = self.group_block_tokens
        if self.hash_block_tokens is None:
            resolved_hash = math.gcd(*blocks)
        else:
            resolved_hash = self.hash_block_tokens
            if not isinstance(resolved_hash, int) or isinstance(resolved_hash, bool) or resolved_hash <= 0:
                raise BadInput(f"hash_block_tokens: must be a positive integer, got {resolved_hash!r}")
        for group_id, block in enumerate(blocks):
            if block % resolved_hash:
                raise BadInput(
                    f"hash_block_tokens: hash block {resolved_hash} does not divide group {group_id} "
                    f"({self.groups[group_id].label}) block of {block} tokens"
                )
        object.__setattr__(self, "_resolved_hash", resolved_hash)

    # ----- derived sizes -------------------------------------------------------------------------------------

    @cached_property
    def group_block_tokens(self) -> tuple[int, ...]:
        """Resolved tokens per block, one per group (the single source of truth for every per-group size)."""
        return tuple(g.resolved_block_tokens(self.dcp) for g in self.groups)

    @property
    def hash_tokens(self) -> int:
        """The hash block in tokens (resolved default when `hash_block_tokens` is None)."""
        return self._resolved_hash

    @cached_property
    def scheduler_block_tokens(self) -> int:
        return math.lcm(*self.group_block_tokens)

    @cached_property
    def blocks_per_scheduler_block(self) -> int:
        """Blocks one scheduler block takes across all groups: one state per Mamba group, sched/block elsewhere."""
        sched = self.scheduler_block_tokens
        return sum(1 if g.kind.is_mamba else sched // block for g, block in zip(self.groups, self.group_block_tokens))

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @cached_property
    def full_attention_group_ids(self) -> tuple[int, ...]:
        return tuple(i for i, g in enumerate(self.groups) if g.kind.scales_with_dcp)

    @cached_property
    def block_bytes(self) -> int:
        """Bytes one block id occupies across the whole KV cache on this rank.

        vLLM's hybrid allocator lets one layer of every group share a tensor (pages are padded to one size), so a
        block id owns a row in every tensor: the largest group's page bytes, not their sum.
        """
        return max(g.page_bytes for g in self.groups)

    # ----- fine-grained hits -------------------------------------------------------------------------------

    @cached_property
    def fine_grained(self) -> FineGrainedVerdict:
        """Whether lookups may stop on hash boundaries inside group blocks (vLLM's conditions, kept as they are)."""
        hash_tokens = self.hash_tokens
        if not self.allow_fine_grained:
            return FineGrainedVerdict(
                False, "disabled: the lazy store policy (or configuration) turns fine-grained hits off"
            )
        # vLLM only turns partial hash hits on when a Mamba align state can exist between scheduler blocks.
        threshold_ok: Callable[[int], bool] = (
            (lambda b: b >= hash_tokens) if self.dcp > 1 else (lambda b: b > hash_tokens)
        )
        if not any(g.kind is GroupKind.MAMBA_ALIGN and threshold_ok(g.block_tokens) for g in self.groups):
            relation = ">=" if self.dcp > 1 else ">"
            return FineGrainedVerdict(
                False,
                f"no mamba_align group with block {relation} hash block {hash_tokens}: "
                "block-aligned hits already end on every reachable boundary",
            )
        blocking = tuple(
            i
            for i, (g, block) in enumerate(zip(self.groups, self.group_block_tokens))
            if not g.kind.fine_grained_capable and block != hash_tokens
        )
        if blocking:
            names = ", ".join(
                f"group {i} {self.groups[i].kind.value} (block {self.group_block_tokens[i]} != hash {hash_tokens})"
                for i in blocking
            )
            return FineGrainedVerdict(False, f"these groups require block-aligned lookups: {names}", blocking)
        return FineGrainedVerdict(True, "")

    @property
    def alignment_tokens(self) -> int:
        """Unit of hit lengths and of eager-store coverage: the hash block if fine-grained, else the scheduler block."""
        return self.hash_tokens if self.fine_grained.enabled else self.scheduler_block_tokens

    # ----- arithmetic used by the manager -----------------------------------------------------------------

    def load_plan(self, *, local_tokens: int, external_tokens: int) -> tuple[GroupLoadPlan, ...]:
        """Per-group device positions that an external hit of `external_tokens` fills after `local_tokens`."""
        _require_non_negative("local_tokens", local_tokens)
        _require_non_negative("external_tokens", external_tokens)
        if local_tokens % self.scheduler_block_tokens:
            raise ValueError(
                f"local_tokens: {local_tokens} is not a multiple of the scheduler block "
                f"{self.scheduler_block_tokens}; an external hit must start on a scheduler block"
            )
        if external_tokens % self.alignment_tokens:
            raise ValueError(
                f"external_tokens: {external_tokens} is not a multiple of the hit alignment {self.alignment_tokens}"
            )
        plans = []
        for group_id, (group, block) in enumerate(zip(self.groups, self.group_block_tokens)):
            num_blocks = -(-external_tokens // block)
            real = self._real_blocks(group, block, local_tokens, external_tokens, num_blocks)
            plans.append(GroupLoadPlan(group_id, num_blocks, local_tokens // block, real, real * group.page_bytes))
        return tuple(plans)

    @staticmethod
    def _real_blocks(group: CacheGroupSpec, block: int, local: int, external: int, num_blocks: int) -> int:
        if num_blocks == 0:
            return 0
        if group.kind.is_mamba:
            return 1  # only the state at the hit boundary is needed
        end = local + external
        if group.kind is GroupKind.SLIDING_WINDOW:
            # The next token attends to the last window-1 tokens before the boundary.
            first_needed = max(0, end - (group.window - 1)) // block
        elif group.kind is GroupKind.CHUNKED_LOCAL:
            first_needed = (end // group.window) * group.window // block
        else:
            return num_blocks
        first_loaded = local // block
        last_loaded = first_loaded + num_blocks  # exclusive
        return max(0, last_loaded - max(first_loaded, first_needed))

    def eager_ready_blocks(self, confirmed_tokens: int) -> tuple[int, ...]:
        """Per group, how many leading blocks an eager store may copy once `confirmed_tokens` are computed."""
        _require_non_negative("confirmed_tokens", confirmed_tokens)
        aligned = confirmed_tokens // self.alignment_tokens * self.alignment_tokens
        return tuple(aligned // block for block in self.group_block_tokens)

    def lazy_target_blocks(self, max_num_batched_tokens: int) -> int:
        """The lazy policy's free-queue watermark: blocks one step could need per group, doubled for headroom."""
        _require_positive("max_num_batched_tokens", max_num_batched_tokens)
        need = 0
        for group, block in zip(self.groups, self.group_block_tokens):
            if group.kind.is_mamba:
                need += 2
            elif group.kind is GroupKind.SLIDING_WINDOW:
                need += -(-group.window // block) + 1
            else:
                need += -(-max_num_batched_tokens // block)
        return need * 2

    def cpu_capacity_blocks(self, cpu_bytes: int, *, world_size: int = 1) -> int:
        """CPU pool size in blocks per rank (the null block included) for a server-wide byte budget split evenly
        over `world_size` ranks; under `MIN_CPU_BLOCKS_PER_RANK` raises `cpu_tier_too_small`'s line."""
        _require_positive("world_size", world_size)
        _require_non_negative("cpu_bytes", cpu_bytes)
        if self.block_bytes <= 0:
            raise BadInput("page_bytes: every group has page_bytes 0, so the pool size in blocks is undefined")
        blocks = cpu_bytes // world_size // self.block_bytes
        if blocks < MIN_CPU_BLOCKS_PER_RANK:
            raise BadInput(cpu_tier_too_small("cpu_bytes", cpu_bytes, self.block_bytes, world_size))
        return blocks

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary, the shape `kvtk geometry --json` prints."""
        verdict = self.fine_grained
        return {
            "groups": [
                {
                    "group_id": i,
                    "name": g.label,
                    "kind": g.kind.value,
                    "spec_block_tokens": g.block_tokens,
                    "resolved_block_tokens": block,
                    "window_tokens": g.window_tokens,
                    "page_bytes": g.page_bytes,
                    "positionally_stable": g.kind.positionally_stable,
                }
                for i, (g, block) in enumerate(zip(self.groups, self.group_block_tokens))
            ],
            "dcp": self.dcp,
            "hash_block_tokens": self.hash_tokens,
            "scheduler_block_tokens": self.scheduler_block_tokens,
            "alignment_tokens": self.alignment_tokens,
            "block_bytes": self.block_bytes,
            "fine_grained": {
                "enabled": verdict.enabled,
                "reason": verdict.reason,
                "blocking_group_ids": list(verdict.blocking_group_ids),
            },
        }


def _require_non_negative(field_name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadInput(f"{field_name}: must be a non-negative integer, got {value!r}")


def _require_positive(field_name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadInput(f"{field_name}: must be a positive integer, got {value!r}")
