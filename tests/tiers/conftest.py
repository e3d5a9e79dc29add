"""A ramfs mount for the disk tier tests (a real file system that refuses O_DIRECT)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def ramfs(tmp_path: Path):
    """A real file system that refuses O_DIRECT (ramfs answers EINVAL at open); needs root to mount."""
    mount = tmp_path / "ramfs"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mount)], capture_output=True).returncode
    ):
        pytest.skip("cannot mount a ramfs here (needs root): the O_DIRECT refusal path is not exercised")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
