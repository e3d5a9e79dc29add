"""Where the toolkit reads the files it ships and writes what it generates.

Shipped files live at the repository's top level (`data/`: model presets, tiny model configs, traces, reference
results; `kernels/`: native and Triton copy sources; `notebooks/`: the jupytext reports). `setup.py` maps them into
the package as `toolkit._data`, `toolkit._kernels` and `toolkit._notebooks`, so an editable checkout and an
installed wheel find them the same way, through `importlib.resources`. They must be plain files on disk (the native
copy compiles its source, papermill opens notebooks by path); a zipped install is refused with a clear error.

Generated files (tiny model weights, the compiled native copy) go to a per-user cache, `$KVTK_CACHE_DIR` or
`~/.cache/kvtk`; the tiny models stay under the checkout's `.cache/models` when run from a source checkout.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def _package_dir(package: str) -> Path:
    try:
        root = files(package)
    except ModuleNotFoundError:
        # A plain copy of the repository with no install (a GPU box for `kernels/gpu_check.sh`): the folder mapping
        # does not exist, so read the top-level folder beside the package.
        folder = Path(__file__).resolve().parent.parent / _FOLDERS[package]
        if folder.is_dir():
            return folder
        raise
    if not isinstance(root, Path):
        raise RuntimeError(
            f"{package}: the toolkit's shipped files must be files on disk, got {root!r} "
            "(install the wheel unzipped, as pip does)"
        )
    return root


_FOLDERS = {"toolkit._data": "data", "toolkit._kernels": "kernels", "toolkit._notebooks": "notebooks"}


def data_dir() -> Path:
    """The shipped `data/` folder."""
    return _package_dir("toolkit._data")


def kernels_dir() -> Path:
    """The shipped `kernels/` folder."""
    return _package_dir("toolkit._kernels")


def notebooks_dir() -> Path:
    """The shipped `notebooks/` folder."""
    return _package_dir("toolkit._notebooks")


def user_cache_dir() -> Path:
    """`$KVTK_CACHE_DIR` or `~/.cache/kvtk` (created by whoever writes into it)."""
    return Path(os.environ.get("KVTK_CACHE_DIR") or Path.home() / ".cache" / "kvtk")


def source_checkout() -> Path | None:
    """The repository root when the package is imported from a source checkout (editable install), else None."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "setup.py").is_file() and (root / "pyproject.toml").is_file() else None
