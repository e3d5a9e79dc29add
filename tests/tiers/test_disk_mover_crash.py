"""Killed mid-write, through the cascade's own paths: a child demotes CPU blocks through the worker's `DiskMover`
(staging, async writes past the store's capacity) until SIGKILL; then, as a restarted engine does, the worker
opens the store and the scheduler side reads which keys it kept (`peek.held_keys`, read-only), and every kept key
is promoted back into a host block: each block served is exactly the one demoted under that key, none torn."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from test_disk_mover import _identity, _mover, _settle  # noqa: E402

from toolkit.core.metadata import DiskBatch  # noqa: E402
from toolkit.tiers.disk.peek import held_keys  # noqa: E402

TESTS = Path(__file__).parent
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    import torch
    from test_disk_mover import _mover
    from test_disk_mover_crash import block_bytes
    from toolkit.core.metadata import DiskBatch
    mirrors = [torch.zeros(4, row, dtype=torch.int8) for row in (8192, 4096)]
    mover = _mover(Path(sys.argv[1]), mirrors, slots=24)
    n = 0
    while True:  # demote new blocks for ever (past the 24 slots: evictions and overwrites), until killed
        host = n % 4
        for mirror, data in zip(mirrors, block_bytes(n)):
            mirror[host].copy_(data)
        mover.apply(DiskBatch(event_id=n + 1, demote_host_block_ids=(host,), demote_keys=(b"k%d" % n,)))
        n += 1
        mover.poll()
        time.sleep(0.0005)
        print(mover.counts.demotions_written, flush=True)
    """
)


def block_bytes(n: int) -> list:
    """The rows of the block demoted under key `k<n>` (one per region), the same in the child and here."""
    gen = torch.Generator().manual_seed(n)
    return [torch.randint(-128, 127, (row,), dtype=torch.int8, generator=gen) for row in (8192, 4096)]


def test_sigkill_mid_demotion_then_a_restart_promotes_only_whole_blocks(tmp_path):
    folder = tmp_path / "disk"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder), str(TESTS)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS.parents[1])},
    )  # fmt: skip
    written, deadline = 0, time.monotonic() + 30
    try:
        while written < 60 and time.monotonic() < deadline:  # 60 > 24 slots
            line = child.stdout.readline()
            if not line:
                break
            written = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert written >= 60, f"the child wrote only {written} blocks"
    mirrors = [torch.zeros(4, row, dtype=torch.int8) for row in (8192, 4096)]
    mover = _mover(folder, mirrors, slots=24)  # the worker opens first (vLLM builds the scheduler after it)
    kept = held_keys(folder, _identity(), "block")  # what the scheduler side learns at start
    assert 0 < len(kept) <= 24
    served = failed = 0
    for event, key in enumerate(kept, start=1):
        mover.apply(DiskBatch(event_id=event, promote_host_block_ids=(1,), promote_keys=(key,)))
        state = _settle(mover, (1,))
        if state == "failed":
            failed += 1
            mover.forget((1,))
            continue
        expected = block_bytes(int(key[1:]))
        assert all(torch.equal(m[1], e) for m, e in zip(mirrors, expected)), f"{key!r} served with other bytes"
        served += 1
    mover.close()
    print(f"kept {len(kept)}, served {served}, failed {failed}")
    assert served > 0
