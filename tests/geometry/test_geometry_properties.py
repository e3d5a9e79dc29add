"""Property tests: geometry arithmetic against brute force over random hybrid group sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.core import CacheGroupSpec, GroupKind, HybridGeometry

KINDS = [
    GroupKind.FULL_ATTENTION,
    GroupKind.MLA,
    GroupKind.MAMBA_ALIGN,
    GroupKind.MAMBA_ALL,
    GroupKind.SLIDING_WINDOW,
    GroupKind.CHUNKED_LOCAL,
]


@st.composite
def geometries(draw):
    hash_tokens = draw(st.sampled_from([8, 16, 32]))
    dcp = draw(st.sampled_from([1, 2, 4]))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4))
    if dcp > 1:
        kinds = [k for k in kinds if not k.is_windowed] or [GroupKind.FULL_ATTENTION]
    groups = []
    for kind in kinds:
        block = hash_tokens * draw(st.integers(1, 8))
        window = block * draw(st.integers(1, 6)) if kind.is_windowed else None
        groups.append(
            CacheGroupSpec(
                kind=kind, block_tokens=block, window_tokens=window, page_bytes=draw(st.integers(1, 1 << 20))
            )
        )
    return HybridGeometry(
        groups=tuple(groups), dcp=dcp, hash_block_tokens=hash_tokens, allow_fine_grained=draw(st.booleans())
    )


@settings(max_examples=300, deadline=None)
@given(geometries())
def test_scheduler_block_is_the_least_common_multiple(g):
    blocks = g.group_block_tokens
    assert all(g.scheduler_block_tokens % b == 0 for b in blocks)
    # No smaller positive multiple of the hash block is a multiple of every group block.
    smaller = range(g.hash_tokens, g.scheduler_block_tokens, g.hash_tokens)
    assert not any(all(m % b == 0 for b in blocks) for m in smaller)
    assert all(b % g.hash_tokens == 0 for b in blocks)


@settings(max_examples=300, deadline=None)
@given(geometries())
def test_resolved_sizes_scale_only_dcp_kinds(g):
    for spec, block in zip(g.groups, g.group_block_tokens):
        expected = (
            spec.block_tokens * g.dcp if spec.kind in (GroupKind.FULL_ATTENTION, GroupKind.MLA) else spec.block_tokens
        )
        assert block == expected


@settings(max_examples=300, deadline=None)
@given(geometries(), st.data())
def test_fine_grained_verdict_follows_the_rules(g, data):
    verdict = g.fine_grained
    mamba_ok = any(
        s.kind is GroupKind.MAMBA_ALIGN
        and (s.block_tokens >= g.hash_tokens if g.dcp > 1 else s.block_tokens > g.hash_tokens)
        for s in g.groups
    )
    blockers = [
        i for i, (s, b) in enumerate(zip(g.groups, g.group_block_tokens)) if s.kind.is_windowed and b != g.hash_tokens
    ]
    assert verdict.enabled == (g.allow_fine_grained and mamba_ok and not blockers)
    if verdict.enabled:
        assert verdict.reason == "" and g.alignment_tokens == g.hash_tokens
    else:
        assert verdict.reason and g.alignment_tokens == g.scheduler_block_tokens
        if g.allow_fine_grained and mamba_ok:
            assert list(verdict.blocking_group_ids) == blockers


@settings(max_examples=300, deadline=None)
@given(geometries(), st.data())
def test_load_plan_against_brute_force(g, data):
    local = g.scheduler_block_tokens * data.draw(st.integers(0, 4))
    external = g.alignment_tokens * data.draw(st.integers(0, 40))
    plans = g.load_plan(local_tokens=local, external_tokens=external)
    for plan, block, spec in zip(plans, g.group_block_tokens, g.groups):
        # Brute force: every block position that holds at least one token of [local, local + external).
        positions = sorted({t // block for t in range(local, local + external)})
        assert plan.num_blocks == len(positions)
        if positions:
            assert plan.gpu_start_index == positions[0] == local // block
        assert 0 <= plan.num_real_blocks <= plan.num_blocks
        assert plan.bytes == plan.num_real_blocks * spec.page_bytes
        if spec.kind is GroupKind.SLIDING_WINDOW and external:
            end = local + external
            needed = {t // block for t in range(max(0, end - spec.window_tokens + 1), end)}
            assert plan.num_real_blocks == len(needed & set(positions))


@settings(max_examples=300, deadline=None)
@given(geometries(), st.integers(0, 5000))
def test_eager_ready_blocks_are_whole_blocks_inside_the_aligned_prefix(g, confirmed):
    aligned = confirmed - confirmed % g.alignment_tokens
    for ready, block in zip(g.eager_ready_blocks(confirmed), g.group_block_tokens):
        assert ready == sum(1 for start in range(0, aligned, block) if start + block <= aligned)
