"""`kvtk bench tiers` prints a row per (op, block, queue depth) with the tier's rate, the raw rate and their ratio,
and names the host and the file system; bad options are one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toolkit.cli.main import main


def _kvtk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolkit", "bench", "tiers", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_small_run_prints_ratios_and_the_file_system(tmp_path):
    done = _kvtk("--dir", str(tmp_path), "--block-kib", "256", "--queue-depths", "1,2", "--file-mib", "16",
                 "--mib", "4", "--repeats", "1", "--policy-accesses", "5000", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "file_system" in report["host"] and report["host"]["tier_io"]
    cells = {(r["op"], r["block_kib"], r["queue_depth"]) for r in report["rows"]}
    assert cells == {(op, 256, qd) for op in ("read", "write") for qd in (1, 2)}
    for row in report["rows"]:
        assert row["tier_gbps"] > 0 and row["raw_gbps"] > 0 and row["ratio"] > 0
        assert row["io_path"] in ("aio", "threads")
    assert set(report["host"]["tier_io_path"].split(" (")[0].split(", ")) == {r["io_path"] for r in report["rows"]}
    assert list(tmp_path.iterdir()) == []  # the scratch folder is removed
    assert [p["policy"] for p in report["policies"]] == ["write-through", "write-back", "reused-once"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--block-kib", "abc"], "--block-kib"),
        (["--queue-depths", "0"], "--queue-depths"),
        (["--dir", "/nonexistent-x"], "--dir"),
        (["--io-paths", "uring"], "--io-paths"),
    ],
)
def test_bad_options(capsys, args, message):
    assert main(["bench", "tiers", *args]) == 2  # in process: the parse and the checks, no subprocess start-up
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_table_names_the_target_and_the_ratio(tmp_path, capsys):
    args = ["--dir", str(tmp_path), "--block-kib", "256", "--queue-depths", "1", "--file-mib", "16", "--mib", "2"]
    assert main(["bench", "tiers", *args, "--repeats", "1", "--policy-accesses", "2000", "--io-paths",
                 "threads,auto"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "file_system: " in out and "tier/raw" in out and "target >= 0.8" in out
    for op in ("read ", "write "):
        rows = [line.split() for line in out.splitlines() if line.startswith(op) and "KiB" in line]
        assert len(rows) == 2 and rows[0][4] == "threads" and rows[1][4] in ("aio", "threads"), rows
    assert "reads (threads): tier/raw" in out
    assert "reused-once" in out and "written/loaded" in out


def test_the_default_sizes_pass_the_checks(tmp_path, monkeypatch):
    """The defaults (512 MiB, 4 MiB blocks, QD 16) must not trip the bench's own capacity check."""
    import argparse

    from toolkit.bench import tiers

    parser = argparse.ArgumentParser()
    tiers.add_arguments(parser)
    args = parser.parse_args(["--dir", str(tmp_path)])
    monkeypatch.setattr(tiers, "_cells", lambda *a: ([], True))  # the sizes only, no I/O
    monkeypatch.setattr(tiers, "_print_table", lambda *a: None)
    args.policy_accesses = 0
    assert tiers.run(args) == 0
