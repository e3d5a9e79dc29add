"""Real geometries in the dry engine: every model preset's fabricated vLLM layout equals what `kvtk geometry` prints,
and vLLM's own scheduler and KV cache manager run requests on it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toolkit.models.presets import list_presets

PRESETS = list_presets()
# (tp, dcp) per preset: one rank, TP 4, and TP 4 with DCP 2 where the model allows it (vLLM refuses DCP with
# sliding-window groups).
PARALLEL = [(1, 1), (4, 1), (4, 2)]


def _allowed(preset: str, dcp: int) -> bool:
    from toolkit.models.presets import load_preset

    return dcp == 1 or "sliding_window" not in load_preset(preset)


def kvtk_geometry(*args: str):
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "geometry", "--platform", "cuda", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def printed():
    """`kvtk geometry --json` for every preset and parallel layout, as a user gets it."""
    table = {}
    for tp, dcp in PARALLEL:
        if dcp == 1:
            for entry in kvtk_geometry("--tp", str(tp)):
                table[(entry["preset"], tp, dcp)] = entry
        else:
            for preset in PRESETS:
                if _allowed(preset, dcp):
                    table[(preset, tp, dcp)] = kvtk_geometry("--preset", preset, "--tp", str(tp), "--dcp", str(dcp))
    return table


def test_every_preset_has_a_printed_geometry(printed):
    assert {p for p, _, _ in printed} == set(PRESETS) and len(PRESETS) >= 7


@pytest.mark.parametrize("preset", PRESETS)
def test_fabricated_layout_equals_kvtk_geometry(preset, printed):
    from toolkit.engines.geometry_layout import preset_layout
    from toolkit.vllm.adapters import geometry_from_kv_cache_config

    for tp, dcp in PARALLEL:
        if not _allowed(preset, dcp):
            continue
        want = printed[(preset, tp, dcp)]
        layout = preset_layout(preset, tp=tp, dcp=dcp)
        kv = layout.kv_cache_config(num_blocks=10)
        # Read back through the connector's own adapter: what the connector will believe about this layout.
        seen = geometry_from_kv_cache_config(kv, dcp=dcp).describe()
        fields = ("kind", "spec_block_tokens", "resolved_block_tokens", "window_tokens", "page_bytes")
        assert [{k: g[k] for k in fields} for g in seen["groups"]] == [
            {k: g[k] for k in fields} for g in want["groups"]
        ], (preset, tp, dcp)
        for key in ("hash_block_tokens", "scheduler_block_tokens", "block_bytes"):
            assert seen[key] == want[key], (preset, tp, dcp, key)
        # vLLM's own spec classes, one layer name per model layer, one block id = block_bytes per rank.
        kinds = {
            "full_attention": "FullAttentionSpec",
            "mla": "MLAAttentionSpec",
            "sliding_window": "SlidingWindowSpec",
            "mamba_align": "MambaSpec",
        }
        assert [type(g.kv_cache_spec).__name__ for g in kv.kv_cache_groups] == [
            kinds[g["kind"]] for g in want["groups"]
        ]
        assert all(t.size == 10 * want["block_bytes"] for t in kv.kv_cache_tensors)
        assert layout.device_blocks(10 * want["block_bytes"] + 1) == 10


def test_device_and_cpu_budgets_are_sized_as_vllm_and_the_connector_do():
    from toolkit.engines.geometry_layout import preset_layout
    from toolkit.vllm.config import host_blocks_for

    layout = preset_layout("qwen3-next-80b-a3b", tp=4)
    printed = kvtk_geometry("--preset", "qwen3-next-80b-a3b", "--tp", "4", "--cpu-gib", "512", "--world-size", "4")
    assert layout.device_blocks(100 * 2**30) == 100 * 2**30 // printed["block_bytes"]
    kv = layout.kv_cache_config(num_blocks=1000)
    assert host_blocks_for(kv, 512 * 2**30 // 4) == printed["cpu_pool"]["num_blocks"]
    with pytest.raises(ValueError, match="device-gib"):
        layout.device_blocks(printed["block_bytes"])
    with pytest.raises(ValueError, match="dcp"):
        preset_layout("qwen3-next-80b-a3b", tp=1, dcp=2)
    with pytest.raises(ValueError, match="preset"):
        preset_layout("no-such-model")


@pytest.mark.engine
@pytest.mark.parametrize("preset", PRESETS)
def test_vllm_scheduler_runs_every_preset(preset):
    """vLLM's Scheduler + KVCacheManager with the toolkit connector: a shared prefix is computed once, served from the
    device in the cold phase and from the CPU tier after a device reset; at TP 4 (and DCP 2 where allowed) too."""
    from toolkit.engines.base import VariantSpec
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.runner import phase_prompts
    from toolkit.workloads.generators import few_shot

    requests = phase_prompts(few_shot(num_requests=3, prefix_tokens=4000, question_tokens=100, seed=2))
    for tp, dcp in ((1, 1), (4, 2 if _allowed(preset, 2) else 1)):
        engine = DryEngine(
            VariantSpec(name="toolkit"),
            model=preset,
            cpu_bytes=16 << 30,
            num_gpu_blocks=0,
            prefix_match_unit=None,
            device_bytes=2 << 30,
            tp=tp,
            dcp=dcp,
        )
        desc = engine.describe()
        block = desc.cpu_block_bytes
        assert desc.device_blocks == (2 << 30) // block and desc.cpu_blocks == (16 << 30) // tp // block
        assert (desc.tp, desc.dcp, desc.model) == (tp, dcp, preset)
        cold = engine.run_phase("cold", requests)
        engine.reset_device_cache()
        hot = engine.run_phase("hot", requests)
        sched = desc.scheduler_block_tokens
        shared = 4000 // sched * sched  # the prefix's whole scheduler blocks
        assert cold[0].local_hit_tokens + cold[0].external_hit_tokens == 0
        # A Mamba state exists on the device only where a chunk ended: the second request may have to compute the
        # prefix again (its state at the shared boundary), the third finds it.
        assert cold[2].local_hit_tokens >= shared - sched, (preset, tp, dcp, cold)
        assert hot[0].local_hit_tokens == 0 and hot[0].external_hit_tokens >= shared - sched, (preset, tp, dcp, hot)
        for rec in cold + hot:
            assert rec.local_hit_tokens + rec.external_hit_tokens + rec.recomputed_tokens == rec.prompt_tokens
        engine.close()


@pytest.mark.engine
def test_kvtk_replay_accepts_a_preset(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit",
            "replay",
            "--engine",
            "dry",
            "--model",
            "qwen3-next-80b-a3b",
            "--trace",
            "fewshot:num_requests=4,prefix_tokens=3000",
            "--phases",
            "cold,hot",
            "--device-gib",
            "4",
            "--tp",
            "4",
            "--dcp",
            "2",
            "--cpu-gib",
            "64",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    # replay's default hash unit (the one that makes fine-grained hits possible: 16 here), as kvtk geometry sizes it
    from toolkit.experiments.config import default_prefix_match_unit

    unit = default_prefix_match_unit("qwen3-next-80b-a3b", 4, 2)
    assert unit == 16
    printed = kvtk_geometry(
        "--preset",
        "qwen3-next-80b-a3b",
        "--tp",
        "4",
        "--dcp",
        "2",
        "--cpu-gib",
        "64",
        "--world-size",
        "4",
        "--hash-block",
        str(unit),
    )
    assert printed["fine_grained"]["enabled"]
    assert summary["model"] == "qwen3-next-80b-a3b"
    assert summary["scheduler_block_tokens"] == printed["scheduler_block_tokens"]
    assert summary["hash_block_tokens"] == printed["hash_block_tokens"]
    assert summary["cpu_blocks"] == printed["cpu_pool"]["num_blocks"]
    assert summary["device_blocks"] == 4 * 2**30 // printed["block_bytes"]
    hot = next(p for p in summary["phases"] if p["phase"] == "hot")
    # At the fine-grained default a hit ends on a 16-token boundary inside a 272-token block: every request's hot
    # hit comes from the CPU tier (the device holds no Mamba state there), at least the whole blocks of the prefix.
    assert hot["external_hit_tokens"] >= 4 * (3000 // 272 * 272), hot


def test_tiny_models_are_laid_out_as_the_live_engine_allocates_them():
    """The dry engine's tiny models follow the live engine's dtype rule: every layer of a group shares the block id
    (tiny Qwen2's two layers: one id owns both pages), float32 doubles the page, Qwen3-Next stays in bf16."""
    from toolkit.engines.dry import dry_layout
    from toolkit.models.engine_preset import live_preset
    from toolkit.models.presets import geometry_from_preset
    from toolkit.vllm.config import host_blocks_for

    for dtype in ("bfloat16", "float32"):
        layout = dry_layout("tiny-qwen2", dtype=dtype)
        want = geometry_from_preset(live_preset("tiny-qwen2", dtype=dtype), platform="cpu")
        assert layout.block_bytes == want.block_bytes and layout.block_tokens == want.groups[0].block_tokens
        kv = layout.kv_cache_config(num_blocks=8)
        assert len(kv.kv_cache_groups[0].layer_names) == want.groups[0].num_layers
        assert host_blocks_for(kv, 1 << 30) == (1 << 30) // want.block_bytes
    assert (
        dry_layout("tiny-qwen2", dtype="float32").block_bytes
        == 2 * dry_layout("tiny-qwen2", dtype="bfloat16").block_bytes
    )
    with pytest.raises(ValueError, match="float32"):
        dry_layout("tiny-qwen3-next", dtype="float32")
