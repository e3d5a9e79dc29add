"""Kernels are found through the installed mapping or the source tree; a missing file is never "no Triton"."""

from __future__ import annotations

import pytest

from toolkit.copy import kernel_sources
from toolkit.copy.kernel_sources import KernelSourceMissing


def test_installed_mapping_missing_kernel_is_a_packaging_error_not_an_import_error():
    assert kernel_sources._mapping_installed()  # this venv has the editable install
    with pytest.raises(KernelSourceMissing, match="no_such_kernel"):
        kernel_sources.load_kernel_module("no_such_kernel")


def test_source_tree_fallback_loads_kernels_and_lets_a_missing_dependency_through(tmp_path, monkeypatch):
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "plain.py").write_text("VALUE = 7\n")
    (folder / "needs_dep.py").write_text("import kvtk_absent_dependency\n")
    monkeypatch.setattr(kernel_sources, "_mapping_installed", lambda: False)
    monkeypatch.setattr(kernel_sources, "_source_tree_kernels", lambda: folder)
    monkeypatch.delitem(__import__("sys").modules, "kvtk_source_kernels.plain", raising=False)
    assert kernel_sources.kernels_dir() == folder
    assert kernel_sources.load_kernel_module("plain").VALUE == 7
    with pytest.raises(ModuleNotFoundError) as info:  # what "triton not installed" looks like to callers
        kernel_sources.load_kernel_module("needs_dep")
    assert info.value.name == "kvtk_absent_dependency"
    with pytest.raises(KernelSourceMissing, match="missing.py"):
        kernel_sources.load_kernel_module("missing")
    (folder / "__init__.py").unlink()
    with pytest.raises(KernelSourceMissing, match="no source tree"):
        kernel_sources.kernels_dir()
