"""`kvtk bench copy` says which backend really ran under each name, and `--require` fails when one was not built."""

from __future__ import annotations

import argparse
import json

from toolkit.bench import copy as bench_copy


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
