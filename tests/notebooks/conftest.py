"""One session-wide `kvtk notebooks --smoke` run (every notebook, HTML export) shared by the notebook tests.

`--notebook-out DIR` (root conftest) keeps the run folder; otherwise it lives in pytest's tmp dir.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.cli.main import main


@pytest.fixture(scope="session")
def smoke_run(request, tmp_path_factory):
    out = request.config.getoption("--notebook-out")
    run_dir = Path(out) / "smoke" if out else tmp_path_factory.mktemp("nb") / "run" / "smoke"
    code = main(["notebooks", "--smoke", "--out", str(run_dir)])
    summary = {r["name"]: r for r in json.loads((run_dir / "summary.json").read_text())}
    return run_dir, code, summary
