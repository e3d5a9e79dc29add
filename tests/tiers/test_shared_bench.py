"""`kvtk bench tiers --tier shared` starts its own store, prints put/get rates and latency per block size and queue
depth, and refuses bad options in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from shared_rig import needs_store

from toolkit.cli.main import main


@needs_store
def test_a_small_run_prints_rates_and_latencies():
    done = subprocess.run([sys.executable, "-m", "toolkit", "bench", "tiers", "--tier", "shared", "--block-kib", "256",
                           "--queue-depths", "1,2", "--mib", "2", "--repeats", "1", "--store-mib", "64", "--json"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert "vCPU" in report["host"]["host"] and "Mooncake" in report["host"]["store"]
    cells = {(r["op"], r["block_kib"], r["queue_depth"]) for r in report["rows"]}
    assert cells == {(op, 256, qd) for op in ("put", "get") for qd in (1, 2)}
    for row in report["rows"]:
        assert row["tier_gbps"] > 0 and row["refused_full"] == 0
        qd1 = row["queue_depth"] == 1
        assert (row["p50_ms"] is not None) == qd1 == (row["raw_gbps"] is not None) == (row["tier_over_raw"] is not None)
    qd1 = [r for r in report["rows"] if r["queue_depth"] == 1]
    assert all(0 < r["p50_ms"] <= r["p99_ms"] and r["tier_over_raw"] > 0 for r in qd1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--store", "redis://x:1"], "--store"),
        (["--store-mib", "8"], "--store-mib"),
        (["--queue-depths", "65"], "--queue-depths"),
        (["--mib", "512", "--store-mib", "64"], "--store-mib"),
    ],
)
def test_bad_options(capsys, args, message):
    assert main(["bench", "tiers", "--tier", "shared", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
