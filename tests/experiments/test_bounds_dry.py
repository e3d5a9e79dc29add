"""Bounds that bound (issue 36), through the real dry engine (vLLM's scheduler and KV cache manager with the
toolkit's connector or a baseline): every phase's achieved hits (CPU-tier, and device plus CPU-tier) stay under its
Belady bound and the bound under the oracle, each request's hits under its oracle (`check_bounds`), on

- random traces (`test_random_traces...`): a few documents shared as prefixes, random lengths and arrival gaps (so
  requests overlap in flight), in the kvtk format and the Mooncake format (block ids, 512 tokens a block); tiers of a
  few blocks, so they evict; random hash units and baselines. Each example is one run (cold, hot, pressure, replay);
- every committed trace (`data/traces/*.jsonl`) and the shared Mooncake trace's first requests, both tiers small;
- a trace larger than both tiers together, where the bound binds (below the oracle), so the check is not the
  oracle's twice over.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.workloads.resolve import resolve_trace, traces_dir

pytestmark = pytest.mark.engine

# The longest prompt plus its output (2,600 + 4 tokens kvtk, 2,560 + 4 Mooncake) in 640-token scheduler blocks of
# four group blocks (three Mamba, one attention): the device cache must hold it.
MIN_DEVICE_BLOCKS = 4 * 5
TINY_BLOCK_BYTES = 163_840  # a tiny-qwen3-next bf16 group block; the tier is sized in these (see `_cpu_gib`)
VOCAB = 2048


def check_bounds(result) -> None:
    """achieved <= belady <= oracle per variant and phase (CPU-tier hits and device + CPU-tier hits), lru <= belady,
    and every request's hits <= its oracle."""
    for row in result.summary["phases"]:
        where = (row["variant"], row["phase"], row)
        hits = row["local_hit_tokens"] + row["external_hit_tokens"]
        assert row["external_hit_tokens"] <= hits <= row["belady_hit_tokens"] <= row["oracle_reusable_tokens"], where
        assert row["lru_sim_hit_tokens"] <= row["belady_hit_tokens"], where
    for req in result.requests.iter_rows(named=True):
        if req["phase"] != "warmup":
            assert req["local_hit_tokens"] + req["external_hit_tokens"] <= req["oracle_reusable_tokens"], req


def _kvtk_trace(rng: random.Random, num_requests: int) -> list[str]:
    docs = [[rng.randrange(VOCAB) for _ in range(rng.randint(100, 4000))] for _ in range(3)]
    lines = [
        json.dumps(
            {"type": "header", "schema": "kvtk.trace/1", "name": "prop", "workload": "prop", "vocab_size": VOCAB}
        )
    ]
    arrival = 0.0
    for i in range(num_requests):
        doc = rng.choice(docs)
        prompt = doc[: rng.randint(0, len(doc))] + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 400))]
        arrival += rng.choice([0.0, 0.001, 0.05])
        request = {"type": "request", "request_id": f"r{i}", "arrival_s": arrival, "max_tokens": rng.randint(1, 4)}
        lines.append(json.dumps({**request, "prompt": [{"token_ids": prompt}]}))
    return lines


def _mooncake_trace(rng: random.Random, num_requests: int) -> list[str]:
    """Requests as paths in a small tree of block ids (shared leading ids = shared prefixes), 512 tokens a block."""
    children: dict[tuple, list[int]] = {}
    next_id, lines, timestamp = 0, [], 0
    for _ in range(num_requests):
        path: tuple = ()
        for _ in range(rng.randint(1, 5)):
            options = children.setdefault(path, [])
            if not options or rng.random() < 0.3:
                options.append(next_id)
                next_id += 1
            path = (*path, rng.choice(options))
        length = (len(path) - 1) * 512 + rng.randint(1, 512)
        timestamp += rng.choice([0, 1, 50])
        row = {"timestamp": timestamp, "input_length": length, "output_length": rng.randint(1, 4)}
        lines.append(json.dumps({**row, "hash_ids": list(path)}))
    return lines


def _cpu_gib(blocks: int) -> float:
    return blocks * TINY_BLOCK_BYTES / 2**30


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**16),
    fmt=st.sampled_from(["kvtk", "mooncake"]),
    cpu_blocks=st.integers(2, 40),
    device_extra=st.integers(0, 12),
    unit=st.sampled_from([64, 128, 320]),
    baseline=st.sampled_from([(), ("lazy",), ("simplecpu",), ("no_fine_grained",)]),
)
def test_random_traces_achieved_never_exceeds_belady_nor_belady_the_oracle(
    tmp_path, connector, seed, fmt, cpu_blocks, device_extra, unit, baseline
):
    rng = random.Random(seed)
    lines = (_kvtk_trace if fmt == "kvtk" else _mooncake_trace)(rng, rng.randint(6, 14))
    device_blocks = MIN_DEVICE_BLOCKS + device_extra
    path = tmp_path / f"{fmt}-{seed}-{cpu_blocks}-{device_blocks}-{unit}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    config = ExperimentConfig(
        engine="dry",
        trace=f"mooncake:{path}" if fmt == "mooncake" else str(path),
        connector=connector,
        cpu_gib=_cpu_gib(cpu_blocks),
        device_blocks=device_blocks,
        prefix_match_unit=unit,
        baselines=baseline,
        out=str(path.with_suffix(".run")),
    )
    check_bounds(run_experiment(config))


MOONCAKE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
SCHEDULER_BLOCK_TOKENS, BLOCKS_PER_SCHEDULER_BLOCK = 640, 4  # tiny-qwen3-next: three Mamba groups, one attention
COMMITTED = sorted(p.stem for p in traces_dir().glob("*.jsonl"))


def _min_device_blocks(trace: str, max_requests: int | None) -> int:
    """The fewest device blocks that hold the trace's longest request (prompt and output)."""
    t = resolve_trace(trace, max_requests=max_requests)
    longest = max(t.prompt_len(r) + r.max_tokens for r in t.requests)
    return -(-longest // SCHEDULER_BLOCK_TOKENS) * BLOCKS_PER_SCHEDULER_BLOCK


def _run(tmp_path, connector, trace: str, *, cpu_blocks: int, max_requests: int | None = None, **extra):
    return run_experiment(
        ExperimentConfig(
            engine="dry",
            trace=trace,
            max_requests=max_requests,
            connector=connector,
            cpu_gib=cpu_blocks * TINY_BLOCK_BYTES / 2**30,
            device_blocks=_min_device_blocks(trace, max_requests),
            out=str(tmp_path / "run"),
            **extra,
        )
    )


def test_the_committed_traces_are_found():
    assert COMMITTED, f"no committed traces under {traces_dir()}"


@pytest.mark.parametrize("trace", COMMITTED)
@pytest.mark.parametrize("cpu_blocks", [2, 24])
def test_every_committed_trace(tmp_path, connector, trace, cpu_blocks):
    check_bounds(_run(tmp_path, connector, trace, cpu_blocks=cpu_blocks, baselines=("lazy",)))


@pytest.mark.skipif(not MOONCAKE.is_file(), reason="the Mooncake synthetic trace is not in ../shared/traces")
def test_the_mooncake_trace_first_requests(tmp_path, connector):
    check_bounds(_run(tmp_path, connector, f"mooncake:{MOONCAKE}", cpu_blocks=64, max_requests=12))


def test_the_bound_binds_on_a_trace_larger_than_both_tiers(tmp_path, connector):
    # Ten unrelated 2,000-token documents, each sent once: hot needs all ten back, the tiers hold about six.
    lines = [
        json.dumps({"type": "header", "schema": "kvtk.trace/1", "name": "scan", "workload": "scan", "vocab_size": 4096})
    ]
    for i in range(10):
        lines.append(json.dumps({"type": "segment", "segment_id": f"d{i}", "random": {"seed": i, "num_tokens": 2000}}))
    for i in range(10):
        request = {"type": "request", "request_id": f"r{i}", "arrival_s": 0.0, "max_tokens": 1}
        lines.append(json.dumps({**request, "prompt": [{"segment": f"d{i}"}]}))
    path = tmp_path / "scan.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = _run(tmp_path, connector, str(path), cpu_blocks=2, phases=("cold", "hot"))
    check_bounds(result)
    hot = next(p for p in result.summary["phases"] if p["phase"] == "hot")
    assert hot["belady_hit_tokens"] < hot["oracle_reusable_tokens"]


def test_bounds_check_run_reports_and_checks_a_dry_run(capsys):
    from toolkit.bench.bounds_check import main

    argv = ["--run", "4", "--trace", "fewshot-small", "--model", "tiny-qwen3-next", "--tp", "1", "--cpu-gib", "0.01"]
    assert main([*argv, "--device-blocks", "64", "--phases", "cold,hot"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bounds_hold"] and [p["phase"] for p in report["phases"]] == ["cold", "hot"]
    hot = report["phases"][1]
    assert 0 < hot["local_hit_tokens"] + hot["external_hit_tokens"] <= hot["belady_hit_tokens"]
