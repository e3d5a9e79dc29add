"""Hybrid lookup against a plain dict index: per-group matchers, the joint fixed point and rounding rules."""

from toolkit.core import BlockKey, HybridGeometry, HybridLookup, KeyStatus, MissReason, parse_groups_spec

HASHES = [f"h{i}" for i in range(64)]  # hash i covers tokens [0, (i + 1) * hash_tokens)


class DictIndex:
    def __init__(self):
        self.blocks = {}

    def put(self, group_id, end, hash_tokens=16):
        self.blocks[BlockKey(group_id, HASHES[end // hash_tokens - 1])] = 100 + len(self.blocks)
        return self.blocks[BlockKey(group_id, HASHES[end // hash_tokens - 1])]

    def lookup(self, key):
        return self.blocks.get(key)

    def key_status(self, key):
        return KeyStatus.NEVER_STORED


def _lookup(groups, **kw):
    geo = HybridGeometry(groups=parse_groups_spec(groups), **kw)
    index = DictIndex()
    return geo, index, HybridLookup(geo, index)


def test_full_attention_probes_interior_boundaries_of_the_first_missing_block_high_to_low():
    geo, index, lookup = _lookup("full_attention:64,mamba_align:64", hash_block_tokens=16)
    index.put(0, 64)
    alias_block = index.put(0, 96)  # an alias inside the second block
    index.put(0, 112)
    index.put(1, 96)  # the Mamba state exists only at 96
    result = lookup.find(block_hashes=HASHES, num_tokens=200, local_tokens=0)
    assert result.group_reach_tokens[0] == 112 and result.hit_tokens == 96
    assert result.block_ids[0][1] in (alias_block, index.blocks[BlockKey(0, HASHES[6])])
    assert result.block_ids[1] == (0, index.blocks[BlockKey(1, HASHES[5])])  # null-padded Mamba list


def test_sliding_window_needs_only_the_blocks_inside_the_window():
    geo, index, lookup = _lookup("full_attention:16,sliding_window:16/32")
    for end in range(16, 129, 16):
        index.put(0, end)
    index.put(1, 112)
    index.put(1, 128)  # the window group holds only its last two blocks
    result = lookup.find(block_hashes=HASHES, num_tokens=129, local_tokens=0)
    assert result.hit_tokens == 128
    assert result.block_ids[1][:6] == (0,) * 6 and result.block_ids[1][6:] != (0, 0)


def test_chunked_local_needs_only_the_current_chunk():
    geo, index, lookup = _lookup("full_attention:16,chunked_local:16/64")
    for end in range(16, 97, 16):
        index.put(0, end)
    index.put(1, 80)
    index.put(1, 96)  # chunk 64..128: only blocks 4 and 5 are needed at boundary 96
    assert lookup.find(block_hashes=HASHES, num_tokens=97, local_tokens=0).hit_tokens == 96


def test_joint_fixed_point_every_group_holds_the_same_boundary():
    geo, index, lookup = _lookup("full_attention:16,mamba_align:64,sliding_window:16/16")
    # no fine-grained (SWA block == hash, but scheduler block 64 alignment comes from the verdict)
    for end in range(16, 257, 16):
        index.put(0, end)
        index.put(2, end)
    index.put(1, 128)
    index.put(1, 256)
    result = lookup.find(block_hashes=HASHES[:16], num_tokens=257, local_tokens=0)
    assert result.hit_tokens == 256 and result.miss_reason is MissReason.NONE
    del index.blocks[BlockKey(2, HASHES[15])]  # the window block at 256 disappears
    result = lookup.find(block_hashes=HASHES[:16], num_tokens=257, local_tokens=0)
    # The window now reaches 240, where the Mamba group has no state: the joint hit falls back to 128.
    assert result.hit_tokens == 128 and result.group_reach_tokens[2] == 240
    assert result.limiting_group_id == 1 and result.miss_reason is MissReason.MAMBA_STATE_ABSENT
    assert result.group_miss_reasons[2] is MissReason.WINDOW_INCOMPLETE


def test_hits_start_after_an_aligned_local_prefix_and_are_alignment_multiples():
    geo, index, lookup = _lookup("full_attention:16,mamba_all:64")  # coarse: alignment = scheduler block 64
    for end in range(16, 257, 16):
        index.put(0, end)
    for end in range(64, 257, 64):
        index.put(1, end)
    assert geo.alignment_tokens == 64
    result = lookup.find(block_hashes=HASHES, num_tokens=250, local_tokens=64)
    assert result.hit_tokens == 128 and result.miss_reason is MissReason.ALIGNMENT_CLAMP
    assert len(result.block_ids[0]) == 8 and len(result.block_ids[1]) == 2
    misaligned = lookup.find(block_hashes=HASHES, num_tokens=250, local_tokens=32)
    assert misaligned.hit_tokens == 0 and misaligned.miss_reason is MissReason.MISALIGNED_LOCAL_PREFIX


def test_blocks_at_serves_exactly_one_boundary_or_none():
    geo, index, lookup = _lookup("full_attention:16,mamba_align:64")
    for end in range(16, 129, 16):
        index.put(0, end)
    index.put(1, 128)
    assert lookup.blocks_at(block_hashes=HASHES, local_tokens=0, end_tokens=64) is None
    index.put(1, 64)
    blocks = lookup.blocks_at(block_hashes=HASHES, local_tokens=0, end_tokens=64)
    assert blocks is not None and len(blocks[0]) == 4 and blocks[1] == (index.blocks[BlockKey(1, HASHES[3])],)


# ----- the joint hit against brute force ------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_GEOMETRIES = (
    ("mamba_align:64,mamba_align:64,full_attention:64", {"hash_block_tokens": 16}),
    ("full_attention:64,mamba_align:64", {"hash_block_tokens": 16}),
    ("full_attention:32,full_attention:32,mamba_align:32", {}),
    ("full_attention:16,sliding_window:16/32,mamba_align:16", {}),
    ("full_attention:16,chunked_local:16/64", {}),
)


@settings(max_examples=300, deadline=None)
@given(
    geo_index=st.integers(0, len(_GEOMETRIES) - 1),
    seed=st.integers(0, 10**6),
    local_blocks=st.integers(0, 3),
    num_tokens=st.integers(1, 500),
)
def test_joint_hit_is_the_largest_boundary_every_group_holds(geo_index, seed, local_blocks, num_tokens):
    """`find` shrinks from the full-attention reach through the sparse groups; brute force asks every group about
    every candidate boundary. Same hit, same blocks, a limiting group that really lacks the next boundary (and every
    group before it holds it), and `diagnose=False` changes only the per-group diagnostics."""
    import random

    spec, kw = _GEOMETRIES[geo_index]
    geo, index, lookup = _lookup(spec, **kw)
    rng = random.Random(seed)
    hash_tokens = geo.hash_tokens
    density = rng.random()
    for group_id in range(geo.num_groups):
        for end in range(hash_tokens, len(HASHES) * hash_tokens + 1, hash_tokens):
            if rng.random() < density:
                index.put(group_id, end, hash_tokens)
    local = local_blocks * geo.scheduler_block_tokens
    full = lookup.find(block_hashes=HASHES, num_tokens=num_tokens, local_tokens=local)
    fast = lookup.find(block_hashes=HASHES, num_tokens=num_tokens, local_tokens=local, diagnose=False)
    assert (fast.hit_tokens, fast.block_ids, fast.miss_reason, fast.limiting_group_id) == (
        full.hit_tokens,
        full.block_ids,
        full.miss_reason,
        full.limiting_group_id,
    )
    # Early answers (nothing to look up) carry the all-zero diagnostics either way.
    assert fast.group_reach_tokens in ((), full.group_reach_tokens)
    assert fast.group_miss_reasons in ((), full.group_miss_reasons)
    if full.hit_tokens == 0 and full.miss_reason in (MissReason.NOTHING_BEYOND_LOCAL, MissReason.LAST_TOKEN_CAP):
        return
    # Brute force over the candidate boundaries: local + k * alignment, up to the last-token and hashed caps.
    hashed_end = len(HASHES) * hash_tokens
    allowed = (
        local
        + (min(hashed_end, (local + num_tokens - 1 - local) // hash_tokens * hash_tokens) - local)
        // geo.alignment_tokens
        * geo.alignment_tokens
    )
    probe_lookup = HybridLookup(geo, index)

    joint = local
    for boundary in range(local + geo.alignment_tokens, allowed + 1, geo.alignment_tokens):
        if all(_group_holds(probe_lookup, g, boundary, local, allowed) for g in range(geo.num_groups)):
            joint = boundary
    assert full.end_tokens == joint
    assert full.block_ids == (
        lookup.blocks_at(block_hashes=HASHES, local_tokens=local, end_tokens=joint) if joint > local else full.block_ids
    )
    if joint < allowed:
        nxt = joint + geo.alignment_tokens
        limiting = full.limiting_group_id
        assert limiting is not None and not _group_holds(probe_lookup, limiting, nxt, local, allowed)
        assert all(_group_holds(probe_lookup, g, nxt, local, allowed) for g in range(limiting))
    else:
        assert full.limiting_group_id is None


def _group_holds(lookup: HybridLookup, group_id: int, boundary: int, local: int, allowed: int) -> bool:
    from toolkit.core.lookup.probe import Probe

    probe = Probe(lookup.tables, HASHES, local, len(HASHES) * lookup.geometry.hash_tokens)
    if lookup.geometry.groups[group_id].kind.is_mamba or lookup.geometry.groups[group_id].kind.is_windowed:
        return probe.largest_at_most(group_id, boundary) == boundary
    # Full attention holds every boundary up to its reach: an interior alias past a boundary covers it too.
    return probe.full_reach(group_id, allowed) >= boundary


@settings(max_examples=200, deadline=None)
@given(geo_index=st.integers(0, len(_GEOMETRIES) - 1), seed=st.integers(0, 10**6), end_tokens=st.integers(0, 1100))
def test_held_prefix_is_the_lookup_from_token_zero_capped_at_the_prefix(geo_index, seed, end_tokens):
    """The local-prefix refresh's query (`held_prefix`) answers what `find` from token 0 with `num_tokens =
    end_tokens + 1` does, hit and blocks, including past the hashed tokens (1,024 here) and on empty indexes."""
    import random

    spec, kw = _GEOMETRIES[geo_index]
    geo, index, lookup = _lookup(spec, **kw)
    rng = random.Random(seed)
    density = rng.random()
    for group_id in range(geo.num_groups):
        for end in range(geo.hash_tokens, len(HASHES) * geo.hash_tokens + 1, geo.hash_tokens):
            if rng.random() < density:
                index.put(group_id, end, geo.hash_tokens)
    found = lookup.find(block_hashes=HASHES, num_tokens=end_tokens + 1, local_tokens=0, diagnose=False)
    assert lookup.held_prefix(block_hashes=HASHES, end_tokens=end_tokens) == (found.hit_tokens, found.block_ids)
