"""Sweeps: a grid of dry experiments (or notebook runs), one cell per parameter combination, on Ray or serially.

- `load_spec`, `parse_spec`, `SweepSpec`, `Cell` (spec.py): YAML/JSON specs, validation, cell expansion;
- `run_sweep`, `SweepOptions`, `SweepResult` (runner.py): run the cells, retry a failed one once, resume;
- `params.build_config` (params.py): a cell's parameters -> the config `kvtk replay --engine dry` builds;
- the sweep folder layout: folder.py; executors (serial, Ray) and the progress line: executor.py.

Ray is optional (`pip install .[sweep]`) and imported only when a sweep runs on it.
"""

from toolkit.sweep.runner import SweepOptions, SweepResult, run_sweep
from toolkit.sweep.spec import Cell, SweepSpec, load_spec, parse_spec

__all__ = ["Cell", "SweepOptions", "SweepResult", "SweepSpec", "load_spec", "parse_spec", "run_sweep"]
