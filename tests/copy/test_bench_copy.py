"""`kvtk bench copy` says which backend really ran under each name, and `--require` fails when one was not built."""

from __future__ import annotations

import argparse
import json

import pytest

from toolkit.bench import copy as bench_copy
from toolkit.errors import BadInput


def _args(*extra):
    parser = argparse.ArgumentParser()
    bench_copy.add_arguments(parser)
    return parser.parse_args(["--json", "--block-kib", "4", "--batch-mib", "1", "--repeats", "1", *extra])


def test_rows_and_header_name_the_backend_that_was_built(capsys):
    assert bench_copy.run(_args()) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backends"]["cpu-torch"] == {"built": "cpu-torch"} and result["driver_version"] is None
    assert {r["built"] for r in result["rows"]} <= {"cpu", "cpu-torch"}
    assert all(r["built"] == r["backend"] for r in result["rows"])


def test_require_fails_when_a_backend_could_not_be_built(capsys):
    assert bench_copy.run(_args("--require", "cpu-torch", "triton")) == 3
    result = json.loads(capsys.readouterr().out)
    assert "triton" in result["error"] and "cpu-torch" not in result["error"]
    assert {r["backend"] for r in result["rows"]} >= {"cpu-torch"}  # what did build is still measured


def test_grid_times_each_block_count_and_skips_cells_over_the_cap(capsys):
    parser = argparse.ArgumentParser()
    bench_copy.add_arguments(parser)
    args = parser.parse_args(
        ["--block-kib", "4", "64", "--block-counts", "8", "64", "--max-grid-mib", "2", "--repeats", "1"]
    )
    assert bench_copy.grid_cells(args, 1 << 20) == [(4, 8), (4, 64), (64, 8)]  # 64 KiB x 64 is 4 MiB: skipped
    assert bench_copy.run(args) == 0
    text = capsys.readouterr().out
    grid = text[text.index("store, random ids") :]
    assert [line.split()[:2] for line in grid.splitlines()[2:5]] == [["4", "8"], ["4", "64"], ["64", "8"]]


def test_grid_flags_are_checked(capsys):
    parser = argparse.ArgumentParser()
    bench_copy.add_arguments(parser)
    with pytest.raises(BadInput, match="--block-counts: every value must be >= 1, got 0"):
        bench_copy.run(parser.parse_args(["--block-counts", "0"]))


def test_a_saved_grid_is_printed_again_and_a_bad_file_is_one_line(tmp_path, capsys):
    from toolkit.bench.copy_cli import print_saved_grid

    parser = argparse.ArgumentParser()
    bench_copy.add_arguments(parser)
    assert (
        bench_copy.run(parser.parse_args(["--json", "--block-kib", "4", "--block-counts", "8", "--repeats", "1"])) == 0
    )
    saved = tmp_path / "run.json"
    saved.write_text(capsys.readouterr().out)
    assert print_saved_grid(str(saved)) == 0
    assert "store, random ids" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert print_saved_grid(str(bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--grid-from:") and "bad.json" in err[0]
