"""Load planning: pair the CPU blocks of a hit with the device blocks the engine allocated.

Rules: docs/reference-behaviour.md, "Load planning".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import NULL_BLOCK_ID


@dataclass(frozen=True, kw_only=True)
class LoadPlan:
    """What `prepare_load` decided for one request.

    Attributes:
        request_id: the request.
        external_tokens: tokens the engine accepted from the CPU tier.
        local_tokens: the device-local prefix the load starts after (the lookup's; where the hit ends is
            `local_tokens + external_tokens`).
        device_block_ids / cpu_block_ids: index-parallel copy pairs (host -> device); empty when declined.
        declined: True when the accepted boundary could not be served for every group (e.g. no Mamba state at a
            partially accepted boundary): nothing is loaded and `failed_device_block_ids` must be recomputed.
        failed_device_block_ids: device blocks covering the accepted range, reported to the engine on decline.
        reason: why it was declined ("" otherwise).
    """

    request_id: str
    external_tokens: int
    local_tokens: int = 0
    device_block_ids: tuple[int, ...] = ()
    cpu_block_ids: tuple[int, ...] = ()
    declined: bool = False
    failed_device_block_ids: tuple[int, ...] = ()
    reason: str = ""


def pair_load_blocks(
    *,
    geometry: HybridGeometry,
    hit_block_ids: Sequence[Sequence[int]],
    device_block_ids: Sequence[Sequence[int]],
    local_tokens: int,
    external_tokens: int,
    device_null_id: int = 0,
) -> tuple[list[int], list[int]]:
    """Per group take `ceil(external / group block)` hit entries, paired with device positions from
    `local // group block`; null CPU entries (outside a window, Mamba positions before the boundary) are skipped."""
    device_out: list[int] = []
    cpu_out: list[int] = []
    for group_id, block in enumerate(geometry.group_block_tokens):
        num_take = -(-external_tokens // block)
        start = local_tokens // block
        table = device_block_ids[group_id]
        for offset, cpu_id in enumerate(hit_block_ids[group_id][:num_take]):
            if cpu_id == NULL_BLOCK_ID:
                continue
            position = start + offset
            if position >= len(table):
                raise ValueError(
                    f"block_ids: group {group_id} has {len(table)} device blocks but the load needs position "
                    f"{position} (local {local_tokens}, external {external_tokens}, block {block})"
                )
            device_id = table[position]
            if device_id == device_null_id:
                continue
            device_out.append(device_id)
            cpu_out.append(cpu_id)
    return device_out, cpu_out


def covering_device_blocks(
    *,
    geometry: HybridGeometry,
    device_block_ids: Sequence[Sequence[int]],
    local_tokens: int,
    external_tokens: int,
    device_null_id: int = 0,
) -> list[int]:
    """Every non-null device block that holds tokens of `[local, local + external)`: what a declined or failed
    load leaves uncomputed."""
    out: list[int] = []
    end = local_tokens + external_tokens
    for group_id, block in enumerate(geometry.group_block_tokens):
        table = device_block_ids[group_id]
        for position in range(local_tokens // block, min(len(table), -(-end // block))):
            if table[position] != device_null_id:
                out.append(table[position])
    return out


@dataclass
class LoadState:
    """A planned or in-flight load: its pinned pairs, its event once sent, and whether its request finished."""

    request_id: str
    device_block_ids: list[int]
    cpu_block_ids: list[int]
    event_id: int | None = None
    finished: bool = False
