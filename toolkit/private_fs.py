"""Folders the toolkit creates (run folders, model weights, build caches) are owner-only."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700


def make_private_dir(path: str | Path) -> Path:
    """Create `path` and any missing parents with mode 0700; folders that already exist are left as they are."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        folder.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)  # exist_ok: another process may create it first
        os.chmod(folder, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
    return path
