"""The connector records its own CPU tier when `record_cache_state_path` names a file (what `kvtk serve
--record-cache-state` sets in a server's engine core), through vLLM's real scheduler in process: the scheduler-role
connector writes the widget's recording, with the stores and loads of a cold and a hot phase; a path that cannot be
written is one error line and the engine serves on without recording."""

from __future__ import annotations

import logging
import random
import stat

import pytest

from toolkit.engines.harness import Harness
from toolkit.engines.harness.phases import Phase, run_phases
from toolkit.viz.recording import load_recording

pytestmark = pytest.mark.engine

CPU_BYTES = 64 << 20


def _cold_hot(harness: Harness) -> dict:
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 1000) for _ in range(2000)] for _ in range(2)]
    cold = Phase("cold", {f"c{i}": p for i, p in enumerate(prompts)}, max_tokens=2)
    hot = Phase("hot", {f"h{i}": p for i, p in enumerate(prompts)}, max_tokens=2, reset_before=True)
    return run_phases(harness, [cold, hot])


def test_the_scheduler_connector_records_and_a_bad_path_is_one_line(tmp_path, caplog):
    path = tmp_path / "served.jsonl"
    harness = Harness(
        "tiny-qwen3-next",
        worker="copy",
        extra_config={"cpu_bytes_to_use": CPU_BYTES, "record_cache_state_path": str(path)},
    )
    results = _cold_hot(harness)
    assert all(r.external_hit_tokens > 0 for r in results["hot"].values())
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600  # written from the start
    harness.connector.shutdown()  # the last write
    recording = load_recording(path)
    kinds = {event["kind"] for step in recording.steps for event in step["events"]}
    assert {"store", "load"} <= kinds and recording.header["truncated"] is None
    assert {r["req_id"] for r in recording.header["requests"]} >= {"c0", "c1", "h0", "h1"}

    bad = tmp_path / "absent" / "served.jsonl"
    with caplog.at_level(logging.ERROR):
        harness = Harness(
            "tiny-qwen3-next",
            worker="copy",
            extra_config={"cpu_bytes_to_use": CPU_BYTES, "record_cache_state_path": str(bad)},
        )
        results = _cold_hot(harness)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "no cache-state recording" in errors[0] and "does not exist" in errors[0], errors
    assert all(r.external_hit_tokens > 0 for r in results["hot"].values()) and not bad.parent.exists()
