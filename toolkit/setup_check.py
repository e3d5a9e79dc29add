"""Smoke check run by `make setup`: the packages the toolkit needs import, and the core stays pure."""

from __future__ import annotations

import importlib
import sys


def main() -> int:
    import toolkit.core  # noqa: F401  (pure Python, must always import)

    failures = []
    for module in ("torch", "vllm.v1.core.sched.scheduler", "vllm.distributed.kv_transfer.kv_connector.v1.base"):
        try:
            importlib.import_module(module)
        except Exception as exc:  # report every broken import, not only the first
            failures.append(f"{module}: {type(exc).__name__}: {exc}")
    if failures:
        print("setup check failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    import torch
    import vllm

    print(f"setup check: torch {torch.__version__}, vllm {vllm.__version__}: scheduler imports")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
