"""An engine's facts (`EngineFacts`): what params.json keeps of them, and how a run folder reads them back."""

from __future__ import annotations

import dataclasses
import json

import pytest

from toolkit.engines.facts import EngineFacts
from toolkit.errors import BadInput

# The keys a dry run's params.json held before the facts were typed (issue 40): a run folder keeps every one.
DRY_KEYS_BEFORE = {
    "engine", "variant", "model", "model_dtype", "tp", "dcp", "hash_block_tokens", "scheduler_block_tokens",
    "prefix_match_unit", "group_block_tokens", "group_page_bytes", "group_kinds", "device_blocks", "device_tokens",
    "blocks_per_scheduler_block", "cpu_bytes", "cpu_block_bytes", "cpu_blocks", "load_bytes_per_s", "store_bytes_per_s",
}  # fmt: skip


def _dry_facts() -> EngineFacts:
    from toolkit.engines.base import VariantSpec
    from toolkit.engines.dry import DryEngine

    engine = DryEngine(
        VariantSpec(name="toolkit"),
        model="tiny-qwen3-next",
        cpu_bytes=1 << 28,
        num_gpu_blocks=64,
        prefix_match_unit=None,
    )
    try:
        return engine.describe()
    finally:
        engine.close()


@pytest.mark.engine
def test_a_dry_engines_facts_keep_their_keys_and_read_back_equal():
    facts = _dry_facts()
    kept = json.loads(json.dumps(facts.to_json()))  # as params.json holds it
    assert DRY_KEYS_BEFORE <= set(kept)
    assert kept["group_kinds"] == ["MambaSpec", "MambaSpec", "MambaSpec", "FullAttentionSpec"]
    assert EngineFacts.from_json(kept) == facts
    # Four groups of one 640-token block each: a scheduler block takes four block ids.
    assert (facts.scheduler_block_tokens, facts.blocks_per_scheduler_block) == (640, 4)
    assert facts.device_tokens == 64 // 4 * 640 and facts.cpu_blocks == (1 << 28) // facts.cpu_block_bytes


def test_an_older_folder_without_the_group_facts_reads_with_none():
    old = {"engine": "server", "model": "m", "hash_block_tokens": 16, "scheduler_block_tokens": 16}
    facts = EngineFacts.from_json({**old, "blocks_per_scheduler_block": 1, "cpu_blocks": None, "unknown_key": 3})
    assert facts.group_kinds is None and facts.cpu_blocks is None and facts.cpu_block_bytes == 0
    assert facts.variant == {}
    with pytest.raises(BadInput, match="engine.blocks_per_scheduler_block: missing"):
        EngineFacts.from_json(old)


@pytest.mark.parametrize(
    ("key", "value"), [("cpu_blocks", "12"), ("scheduler_block_tokens", True), ("group_kinds", [1, 2]), ("model", 7)]
)
def test_a_kept_fact_of_the_wrong_type_is_refused_by_name(key, value):
    good = EngineFacts(
        engine="dry", model="m", variant={}, hash_block_tokens=16, scheduler_block_tokens=16,
        blocks_per_scheduler_block=1, cpu_block_bytes=4096,
    ).to_json()  # fmt: skip
    with pytest.raises(BadInput, match=f"engine.{key}: expected"):
        EngineFacts.from_json({**good, key: value})


def test_facts_are_frozen():
    facts = EngineFacts(
        engine="dry", model="m", variant={}, hash_block_tokens=16, scheduler_block_tokens=16,
        blocks_per_scheduler_block=1, cpu_block_bytes=4096,
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.cpu_blocks = 3  # type: ignore[misc]


@pytest.mark.engine
@pytest.mark.parametrize("model", ["tiny-qwen2", "tiny-qwen3-next", "qwen3-next-80b-a3b", "gpt-oss-20b"])
def test_both_layout_kinds_say_what_vllm_builds_from_them(model):
    """`Layout`'s members (a preset's `ModelLayout`, the hybrid tiny model's `HarnessShape`) against the facts the
    dry engine reads back from vLLM's scheduler and KV cache config built from that layout."""
    from toolkit.engines.base import VariantSpec
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.geometry_layout import dry_layout

    layout = dry_layout(model)
    engine = DryEngine(
        VariantSpec(name="toolkit"), model=model, cpu_bytes=1 << 34, num_gpu_blocks=64, prefix_match_unit=None
    )
    try:
        facts = engine.describe()
    finally:
        engine.close()
    assert layout.scheduler_block_tokens == facts.scheduler_block_tokens
    assert layout.blocks_per_scheduler_block == facts.blocks_per_scheduler_block
    assert (layout.block_bytes, layout.model_dtype) == (facts.cpu_block_bytes, facts.model_dtype)
    assert facts.group_kinds is not None and facts.group_block_tokens is not None
    attention = facts.group_kinds.index("FullAttentionSpec")  # vLLM's cache_config.block_size is its block
    assert layout.block_tokens == facts.group_block_tokens[attention]
