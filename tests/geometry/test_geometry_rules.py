"""Geometry rules: resolved sizes, hash and scheduler blocks, fine-grained eligibility, and bad input."""

from __future__ import annotations

import pytest

from toolkit.core import CacheGroupSpec, GroupKind, HybridGeometry, parse_groups_spec


def geo(spec: str, **kwargs) -> HybridGeometry:
    return HybridGeometry(groups=parse_groups_spec(spec), **kwargs)


def test_dcp_scales_only_full_attention_and_mla():
    g = geo("full_attention:16,mla:16,mamba_align:64,mamba_all:64", dcp=4, hash_block_tokens=16)
    assert g.group_block_tokens == (64, 64, 64, 64)
    g = geo("full_attention:16,mamba_align:64", dcp=2, hash_block_tokens=16)
    # FA 16 x DCP 2 = 32, Mamba stays 64 (not DCP-scaled), scheduler block 64.
    assert g.group_block_tokens == (32, 64)
    assert g.scheduler_block_tokens == 64


def test_default_hash_block_is_gcd_and_scheduler_block_is_lcm():
    g = geo("full_attention:48,sliding_window:32/256")
    assert g.hash_tokens == 16
    assert g.scheduler_block_tokens == 96


def test_fine_grained_needs_a_mamba_align_state_between_scheduler_blocks():
    on = geo("full_attention:16,mamba_align:64", hash_block_tokens=16)
    assert on.fine_grained.enabled and on.alignment_tokens == 16
    no_mamba = geo("full_attention:16", hash_block_tokens=16)
    assert not no_mamba.fine_grained.enabled
    assert "no mamba_align group" in no_mamba.fine_grained.reason
    assert no_mamba.alignment_tokens == 16  # the scheduler block, which here equals the hash block


def test_fine_grained_blocked_by_sliding_window_names_the_group():
    g = geo("full_attention:64,mamba_align:64,sliding_window:64/256", hash_block_tokens=16)
    verdict = g.fine_grained
    assert not verdict.enabled
    assert verdict.blocking_group_ids == (2,)
    assert "group 2 sliding_window (block 64 != hash 16)" in verdict.reason
    assert g.alignment_tokens == 64


def test_sliding_window_with_block_equal_to_hash_does_not_block():
    g = geo("full_attention:64,mamba_align:64,sliding_window:16/256", hash_block_tokens=16)
    assert g.fine_grained.enabled


def test_lazy_policy_turns_fine_grained_off():
    g = geo("full_attention:16,mamba_align:64", hash_block_tokens=16, allow_fine_grained=False)
    assert not g.fine_grained.enabled and "lazy" in g.fine_grained.reason
    assert g.alignment_tokens == 64


def test_dcp_threshold_accepts_mamba_block_equal_to_hash():
    # With DCP > 1 a Mamba block equal to the hash block still enables fine-grained hits (>=, not >).
    assert geo("full_attention:16,mamba_align:32", dcp=2, hash_block_tokens=32).fine_grained.enabled
    assert not geo("full_attention:32,mamba_align:32", dcp=1, hash_block_tokens=32).fine_grained.enabled


def test_load_plan_matches_the_dcp_worked_example():
    # docs/reference-behaviour.md, "Load planning": local 64 + external 96 -> FA 3 blocks at positions 2-4, Mamba 2 entries from 1, 1 real.
    g = geo("full_attention:16,mamba_align:64", dcp=2, hash_block_tokens=16)
    fa, mamba = g.load_plan(local_tokens=64, external_tokens=96)
    assert (fa.num_blocks, fa.gpu_start_index, fa.num_real_blocks) == (3, 2, 3)
    assert (mamba.num_blocks, mamba.gpu_start_index, mamba.num_real_blocks) == (2, 1, 1)


def test_sliding_window_load_only_moves_blocks_inside_the_window():
    g = geo("full_attention:16,sliding_window:16/48")
    _, swa = g.load_plan(local_tokens=0, external_tokens=160)
    # The next token (160) attends to tokens 113..159: blocks 7, 8, 9 (cdiv(47, 16) = 3).
    assert (swa.num_blocks, swa.num_real_blocks) == (10, 3)


def test_eager_ready_blocks_use_the_alignment():
    g = geo("full_attention:16,mamba_all:64", hash_block_tokens=16, dcp=1)
    assert not g.fine_grained.enabled  # mamba_all does not enable fine-grained hits
    assert g.eager_ready_blocks(100) == (4, 1)  # aligned to 64
    f = geo("full_attention:16,mamba_align:64", hash_block_tokens=16)
    assert f.eager_ready_blocks(100) == (6, 1)  # aligned to 96


def test_lazy_target_counts_each_group_and_doubles():
    g = geo("full_attention:16,mamba_align:64,sliding_window:16/64", hash_block_tokens=16)
    # FA ceil(64/16)=4, Mamba 2, SWA ceil(64/16)+1 = 5 -> 11, doubled.
    assert g.lazy_target_blocks(64) == 22


def test_cpu_capacity_uses_the_largest_group_page_per_block_id():
    groups = (
        CacheGroupSpec(kind=GroupKind.FULL_ATTENTION, block_tokens=16, page_bytes=4096),
        CacheGroupSpec(kind=GroupKind.MAMBA_ALIGN, block_tokens=64, page_bytes=4096),
    )
    g = HybridGeometry(groups=groups, hash_block_tokens=16)
    assert g.block_bytes == 4096
    assert g.cpu_capacity_blocks(8 * 4096 * 2, world_size=2) == 8


@pytest.mark.parametrize(
    ("build", "field", "numbers"),
    [
        (lambda: geo("full_attention:16,mamba_align:64", hash_block_tokens=48), "hash_block_tokens", "48"),
        (lambda: geo("full_attention:0"), "block_tokens", "0"),
        (lambda: geo("full_attention:-16"), "block_tokens", "-16"),
        (lambda: geo("sliding_window:64/32"), "window_tokens", "32"),
        (lambda: geo("full_attention:16,sliding_window:16/128", dcp=2), "dcp", "DCP=2"),
        (lambda: geo("full_attention:16", pcp=2), "pcp", "pcp=2"),
        (lambda: geo("full_attention:16", dcp=0), "dcp", "0"),
        (lambda: geo("attention:16"), "kind", "'attention'"),
        (lambda: geo("full_attention:16/64"), "window_tokens", "64"),
        (lambda: geo("full_attention:x"), "block_tokens", "'x'"),
        (lambda: HybridGeometry(groups=()), "groups", "none"),
        (lambda: geo("full_attention:16@1024").cpu_capacity_blocks(1000), "cpu_bytes", "1024"),
        (
            lambda: geo("full_attention:16,mamba_align:64").load_plan(local_tokens=16, external_tokens=64),
            "local_tokens",
            "16",
        ),
        (
            lambda: geo("full_attention:16,mamba_align:64", hash_block_tokens=16).load_plan(
                local_tokens=0, external_tokens=8
            ),
            "external_tokens",
            "8",
        ),
    ],
)
def test_bad_geometry_is_refused_naming_field_and_value(build, field, numbers):
    with pytest.raises(ValueError) as err:
        build()
    message = str(err.value)
    assert message.startswith(field) or f"{field}:" in message, message
    assert numbers in message, message
