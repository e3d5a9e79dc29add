"""Right metadata: each variant's params describe that variant as its connector runs it, and vLLM's SimpleCPU
baseline counts its store bytes like the toolkit connector (it read 0 with hundreds of MB loaded)."""

from __future__ import annotations

import json

import pytest

from toolkit.engines.base import VariantSpec, variants_for
from toolkit.experiments.config import ExperimentConfig
from toolkit.experiments.runner import run_experiment


def test_variant_descriptions_follow_the_connector():
    toolkit, simplecpu, none = variants_for(
        policy="eager", fine_grained=True, eviction="slru", baselines=("simplecpu", "no_offload")
    )
    assert toolkit.describe()["fine_grained"] is True and toolkit.describe()["eviction"] == "slru"
    assert simplecpu.describe() == {
        "name": "simplecpu",
        "connector": "simplecpu",
        "corrupt_loads": False,
        "policy": "eager",
        "fine_grained": False,
        "eviction": "lru",
    }
    assert VariantSpec(name="s", connector="simplecpu", policy="lazy").describe()["policy"] == "lazy"
    assert none.describe()["policy"] is None and none.describe()["eviction"] is None


@pytest.mark.engine
def test_simplecpu_counts_its_stores_and_says_what_it_is(tmp_path):
    config = ExperimentConfig(
        engine="dry", trace="fewshot-small", baselines=("simplecpu",), phases=("cold", "hot"), out=str(tmp_path / "r")
    )
    result = run_experiment(config)
    rows = {(p["variant"], p["phase"]): p for p in result.summary["phases"]}
    block_bytes = json.loads((tmp_path / "r" / "params.json").read_text())["engine"]["cpu_block_bytes"]
    for variant in ("toolkit", "simplecpu"):
        assert rows[(variant, "hot")]["load_bytes"] > 0  # the tier was used: it must have been filled
        stored = rows[(variant, "cold")]["store_bytes"]
        assert stored > 0 and stored % block_bytes == 0, (variant, stored, block_bytes)
    # Both tiers hold the same block-aligned prefixes: the toolkit stores them plus its fine-grained extras.
    assert 0.3 < rows[("simplecpu", "cold")]["store_bytes"] / rows[("toolkit", "cold")]["store_bytes"] <= 1.0
    params = json.loads((tmp_path / "r" / "params.json").read_text())
    described = {v["name"]: v for v in params["variants"]}
    assert described["simplecpu"]["fine_grained"] is False and described["simplecpu"]["eviction"] == "lru"
    assert "fine_store_priority" not in described["simplecpu"]
