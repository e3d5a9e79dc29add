"""`kvtk bench serve`'s pure parts: the Mooncake file scaled to a tiny model, refused options, the table. The
servers and vLLM's client run in the benchmark itself (minutes; its numbers are in the closing notes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.bench.serve import format_rows, scale_mooncake

# Beside the repository, not in it (like test_dry_fast.py's): found from this file, not the working directory.
MOONCAKE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"


def _write(tmp_path, records):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_scaled_lengths_keep_shared_prefixes(tmp_path):
    path = _write(
        tmp_path,
        [
            {"timestamp": 1000, "input_length": 1024, "output_length": 50, "hash_ids": [1, 2]},
            {"timestamp": 3000, "input_length": 1500, "output_length": 2, "hash_ids": [1, 2, 3]},
            {"timestamp": 5000, "input_length": 100000, "output_length": 9, "hash_ids": list(range(196))},
        ],
    )
    records = scale_mooncake(
        path, num_requests=3, chunk_tokens=32, max_input_tokens=4000, max_output_tokens=16, span_s=10.0
    )
    assert [r["input_length"] for r in records] == [64, 94, 4000]
    assert [r["hash_ids"] for r in records[:2]] == [[1, 2], [1, 2, 3]]  # the shared prefix stays shared
    assert len(records[2]["hash_ids"]) == 125 and [r["output_length"] for r in records] == [16, 2, 9]
    assert [r["timestamp"] for r in records] == [0.0, 5.0, 10.0]


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"input_length": "9"}, "input_length"),
        ({"output_length": -1}, "output_length"),
        ({"hash_ids": [1.5]}, "hash_ids"),
        ({"timestamp": float("inf")}, "timestamp"),
    ],
)
def test_bad_records_name_the_field(tmp_path, bad, field):
    record = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], **bad}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record).replace("Infinity", "1e999") + "\n")
    with pytest.raises(ValueError, match=field):
        scale_mooncake(path, num_requests=1, chunk_tokens=32, max_input_tokens=100, max_output_tokens=4, span_s=1)


@pytest.mark.skipif(not MOONCAKE.is_file(), reason="the Mooncake synthetic trace is not in ../shared/traces")
def test_the_shared_trace_scales(tmp_path):
    records = scale_mooncake(
        MOONCAKE, num_requests=32, chunk_tokens=32, max_input_tokens=4079, max_output_tokens=16, span_s=10.0
    )
    assert len(records) == 32 and max(r["input_length"] for r in records) <= 4079
    assert records[-1]["timestamp"] == 10.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--variants", "toolkit,lmcache"], "--variants"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--trace-seconds", "nan"], "--trace-seconds"),
    ],
)
def test_bad_options_one_line_exit_2(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "bench", "serve", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_table_has_a_row_per_pass():
    rows = [
        {
            "variant": "toolkit",
            "dataset": "prefix_repetition",
            "phase": p,
            "requests": 8,
            "ttft_p50_ms": 10.0,
            "ttft_p99_ms": None,
            "output_tok_s": 5.0,
            "input_tokens": 100,
            "device_hit_tokens": 0,
            "cpu_tier_tokens": 64 if p == "hot" else 0,
        }
        for p in ("cold", "hot")
    ]
    lines = format_rows(rows).splitlines()
    assert len(lines) == 3 and lines[2].split()[-1] == "64" and " - " in lines[1]
