"""Moved: the engine-less harness is `toolkit.experiments.harness` (split by concept there). This name re-exports it
for code written against the old path; import from the new one."""

from toolkit.experiments.harness import *  # noqa: F401,F403
from toolkit.experiments.harness import __all__  # noqa: F401
