"""Repository-root pytest configuration (papermill options live here, per the notebook notes)."""

from __future__ import annotations

import os
import shutil

import pytest


def pytest_addoption(parser):
    parser.addoption("--notebook-out", default=None, help="folder for executed notebooks (default: a tmp dir)")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    cuda = None
    for item in items:
        if "gpu" in item.keywords:
            if cuda is None:
                cuda = _has_cuda()
            if not cuda:
                item.add_marker(skip_gpu)
        if "browser" in item.keywords and not (shutil.which("chromium") or os.environ.get("KVTK_CHROMIUM")):
            item.add_marker(pytest.mark.skip(reason="Debian chromium not installed (make browser-deps)"))
