"""Environment changes undone where they are made: `with scoped_env(NAME="value"): ...` sets the variables for the
block and restores each one's earlier value (or its absence) after it, exception or not.

For variables a library reads while the block runs (vLLM's config checks, a browser a library starts). A variable a
library reads once at its import (huggingface_hub's HF_HUB_OFFLINE, vLLM's logging ones) is set for the process on
purpose where it is set; those sites say so.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def scoped_env(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, before in saved.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before
