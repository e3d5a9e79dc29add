"""Mooncake's native client logs nothing at INFO in an engine's process unless asked to (`MC_LOG_LEVEL`, set by the
tier around its setup only when the environment has none)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from shared_rig import needs_store

from toolkit.tiers.shared import StoreServer

pytestmark = needs_store


def test_the_native_client_logs_no_info_lines_unless_the_environment_asks():
    """A process that writes through a tier and closes it: no INFO line from the native client on its stderr;
    with MC_LOG_LEVEL=INFO in its environment they are there (the user's level wins)."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from shared_rig import config, payload
        from toolkit.tiers.shared import SharedTier
        tier = SharedTier.connect(config(sys.argv[1]))
        tier.submit_write("attn", b"x", payload(1))
        assert [c.reason for c in tier.wait_all()] == ["ok"]
        tier.close()
        """
    )
    with StoreServer(32 << 20) as server:
        runs = {}
        for level in ("", "INFO"):
            env = {k: v for k, v in os.environ.items() if k != "MC_LOG_LEVEL"}
            if level:
                env["MC_LOG_LEVEL"] = level
            runs[level] = subprocess.run(
                [sys.executable, "-c", script, server.master], capture_output=True, text=True, timeout=60, env=env
            )
    for level, run in runs.items():
        assert run.returncode == 0, (level, run.stderr[-2000:])
    info = [line for line in runs[""].stderr.splitlines() if line.startswith("I")]
    assert not info, info[:3]
    assert any(line.startswith("I") for line in runs["INFO"].stderr.splitlines()), runs["INFO"].stderr[-500:]
