"""The toolkit's hits do not depend on the process's hash seed: two processes with different PYTHONHASHSEED run
`kvtk bench scheduler`'s 4-token trace (nearly every step a prefill chunk, several loads finishing in one step)
through vLLM's scheduler and the connector, and reuse exactly the same tokens. Loads used to complete in the order
of vLLM's `finished_recving` set, and the release order of their CPU pins is the eviction order: 156,800 external
hit tokens under one seed, 167,040 under another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine


def _toolkit_hits(seed: int) -> dict:
    kvtk = Path(sys.executable).with_name("kvtk")
    command = [str(kvtk), "bench", "scheduler", "--max-tokens", "4", "--sweep-max-tokens", "", "--repeats", "1"]
    out = subprocess.run(
        [*command, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
    ).stdout
    toolkit = json.loads(out)["toolkit"]
    return {key: toolkit[key] for key in ("steps", "external_hit_tokens", "local_hit_tokens")}


def test_hits_are_the_same_under_two_hash_seeds():
    first, second = _toolkit_hits(1), _toolkit_hits(2)
    assert first == second and first["external_hit_tokens"] > 0, (first, second)
