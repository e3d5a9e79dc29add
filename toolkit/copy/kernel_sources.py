"""Where the copy backends find `kernels/`: the installed package mapping, else the source tree beside `toolkit/`.

`setup.py` maps the top-level `kernels/` folder to `toolkit._kernels`, which exists only once the package is
installed (editable or wheel). A plain copy of the repository (what kernels/gpu_check.sh runs from on a bare GPU
box, with only torch and Triton) has no such module, so both lookups fall back to `<root>/kernels/` beside the
imported `toolkit/` package. Both are resolved lazily, on first use, never at import: `import toolkit.copy` must
work on any interpreter that has torch.

`load_kernel_module` separates the two ways a Triton kernel import can fail: the kernel source is missing (a
`KernelSourceMissing`, a packaging bug, never to be hidden) or Triton itself is not installed (an `ImportError`
naming `triton`, which a caller may treat as "no Triton backend here").
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PACKAGE = "toolkit._kernels"
# Modules loaded from the source tree get this prefix, so they never collide with an installed toolkit._kernels.
_SOURCE_TREE_PREFIX = "kvtk_source_kernels"


class KernelSourceMissing(RuntimeError):
    """Neither the installed package mapping nor the source tree has the kernel file."""


def _source_tree_kernels() -> Path:
    return Path(__file__).resolve().parents[2] / "kernels"


def _mapping_installed() -> bool:
    try:
        return importlib.util.find_spec(_PACKAGE) is not None
    except ModuleNotFoundError:
        return False


def kernels_dir() -> Path:
    """The `kernels/` folder: `toolkit._kernels` when installed, else the one beside the `toolkit/` package."""
    if _mapping_installed():
        from toolkit import locations

        return locations.kernels_dir()
    folder = _source_tree_kernels()
    if not (folder / "__init__.py").is_file():
        raise KernelSourceMissing(f"kernels: no {_PACKAGE} package installed and no source tree at {folder}")
    return folder


def kernel_source(filename: str) -> Path:
    """The path of one kernel source file (raises `KernelSourceMissing` when it is absent)."""
    path = kernels_dir() / filename
    if not path.is_file():
        raise KernelSourceMissing(f"kernels: {filename} not found in {path.parent}")
    return path


def load_kernel_module(name: str) -> ModuleType:
    """Import `kernels/<name>.py` (installed as `toolkit._kernels.<name>`, else straight from the source tree).

    An `ImportError` raised while the kernel module itself imports (no `triton`) propagates unchanged.
    """
    if _mapping_installed():
        try:
            return importlib.import_module(f"{_PACKAGE}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{_PACKAGE}.{name}":  # the file itself is missing: not "no triton"
                raise KernelSourceMissing(f"kernels: {name}.py not found in {_PACKAGE}") from exc
            raise
    qualified = f"{_SOURCE_TREE_PREFIX}.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    path = kernel_source(f"{name}.py")
    spec = importlib.util.spec_from_file_location(qualified, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[qualified]
        raise
    return module
