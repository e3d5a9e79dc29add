"""Batch runs of the notebooks: papermill execution into a run folder, then offline HTML reports.

The notebooks live in `notebooks/` (shipped as `toolkit._notebooks`) as jupytext `py:percent` files
(`NN_name.py`). A run folder gets, per notebook, the executed `NN_name.ipynb`, its `NN_name.html` (plotly.js
inlined, so it renders with no network) and whatever the notebook writes to its `out_dir` parameter (results JSON);
with `png`, every figure as a PNG under `figures/` (`export_pngs`: plotly + kaleido + Chromium).
Folders this module creates are owner-only (0700).

Pitfalls handled here: kernel spec `python3`; `PLOTLY_RENDERER` set for the
kernel so nbconvert keeps the figures; `store_widget_state=False` (the HTML report would otherwise load a widget
manager from a CDN; its static figures carry the content). The visualizer sets its Output's `outputs` trait instead
of printing into it: nbclient 0.11's Output-widget hook raised KeyError or hung a cell until the timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from toolkit import locations
from toolkit.errors import BadInput
from toolkit.private_fs import make_private_dir
from toolkit.viz.export import PNG_WIDTH, chromium_path, export_pngs, notebook_figures  # noqa: F401  (re-exported)

KERNEL_NAME = "python3"
PLOTLY_RENDERER = "plotly_mimetype+notebook"

# Parameters the CI smoke runs inject (the notebooks' own defaults are the interactive sizes).
SMOKE_PARAMETERS: dict[str, dict[str, Any]] = {
    "01_block_geometry": {"dcps": [1, 2, 8], "hash_units": [0, 16]},
    "02_hit_boundaries": {"num_requests": 6, "num_steps": 24},
    "03_cold_hot_replay": {"engine": "dry", "trace": "fewshot-small", "capacity_gib": [0.4]},
    "04_cache_state": {"synthetic_steps": 12},
    "05_copy_bandwidth": {"block_kib": [4, 64, 512], "batch_mib": 4, "repeats": 2},
    "06_sweep": {"axes": {"trace": ["fewshot-small", "longdoc-small"], "eviction": ["slru", "lru"]}},
}


def notebooks_dir() -> Path:
    override = os.environ.get("KVTK_NOTEBOOKS_DIR")
    return Path(override) if override else locations.notebooks_dir()


def list_notebooks() -> list[Path]:
    """Numbered jupytext notebooks, in order."""
    return sorted(p for p in notebooks_dir().glob("[0-9][0-9]_*.py"))


def select_notebooks(only: list[str] | None) -> list[Path]:
    """All notebooks, or those whose stem equals or starts with one of `only` (`04`, `04_cache_state`)."""
    available = list_notebooks()
    if not only:
        return available
    chosen = []
    for name in only:
        matches = [p for p in available if p.stem == name or p.stem.startswith(name)]
        if not matches:
            raise BadInput(f"--only: no notebook matches {name!r}; available: {', '.join(p.stem for p in available)}")
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def default_run_dir() -> Path:
    """`runs/notebooks/<timestamp>` under the working directory, like `kvtk run`'s run folders."""
    return Path("runs") / "notebooks" / time.strftime("%Y%m%d-%H%M%S")


def declared_parameters(path: Path) -> dict[str, dict[str, Any]]:
    """The names (and inferred types/defaults) of the notebook's `parameters` cell."""
    import papermill as pm

    on_disk = _as_ipynb_on_disk(path)
    try:
        return dict(pm.inspect_notebook(str(on_disk)))
    finally:
        on_disk.unlink(missing_ok=True)  # one temporary file per call, removed (`kvtk notebooks --list`)


@contextlib.contextmanager
def _kernel_env() -> Iterator[None]:
    saved = os.environ.get("PLOTLY_RENDERER")
    os.environ["PLOTLY_RENDERER"] = PLOTLY_RENDERER
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PLOTLY_RENDERER", None)
        else:
            os.environ["PLOTLY_RENDERER"] = saved


def read_notebook(path: Path):
    """The jupytext notebook as an nbformat node, with the `python3` kernel spec whatever the file says."""
    import jupytext

    nb = jupytext.read(path)
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata.setdefault("language_info", {"name": "python"})
    return nb


def _as_ipynb_on_disk(path: Path) -> Path:
    # papermill's inspect needs a file path; a sibling temp file keeps relative paths meaningful.
    import tempfile

    import nbformat

    nb = read_notebook(path)
    handle = tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False)
    with handle:
        nbformat.write(nb, handle)
    return Path(handle.name)


@dataclass(frozen=True)
class NotebookResult:
    name: str
    ipynb: Path
    html: Path | None
    seconds: float
    error: str = ""
    pngs: tuple[Path, ...] = ()


def execute_notebook(
    path: Path, out_dir: Path, parameters: dict[str, Any] | None = None, *, timeout_s: int = 120
) -> Path:
    """Execute one notebook into `out_dir/<stem>.ipynb`; a failing cell raises papermill's execution error."""
    import papermill as pm

    out_dir = make_private_dir(Path(out_dir))
    params = {"out_dir": str(out_dir), **(parameters or {})}
    output = out_dir / f"{path.stem}.ipynb"
    with _kernel_env():
        pm.execute_notebook(
            read_notebook(path),
            str(output),
            parameters=params,
            kernel_name=KERNEL_NAME,
            cwd=str(path.parent),
            progress_bar=False,
            store_widget_state=False,
            execution_timeout=timeout_s,
            start_timeout=60,
        )
    return output


def export_html(ipynb: Path) -> Path:
    """HTML next to the notebook; plotly figures keep their inlined plotly.js, so no CDN is needed."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(ipynb, as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    # The template's require.js and MathJax come from a CDN; the reports need neither (plotly.js is inlined).
    body = re.sub(r"<script[^>]*\bsrc=[\"']https?://[^>]*>\s*</script>", "", body)
    target = ipynb.with_suffix(".html")
    target.write_text(body, encoding="utf-8")
    return target


def run_notebooks(
    *,
    only: list[str] | None = None,
    out_dir: Path | None = None,
    smoke: bool = False,
    parameters: dict[str, Any] | None = None,
    html: bool = True,
    png_dir: Path | None = None,
    png_only: set[str] | None = None,
) -> list[NotebookResult]:
    """Execute the chosen notebooks (smoke parameters first, then `parameters`, for the notebooks declaring them).

    A failed notebook is recorded (its partial .ipynb is kept) and the others still run. With `png_dir`, each
    executed notebook's figures are written there as PNGs (a failed export is recorded as that notebook's error).
    """
    chosen = select_notebooks(only)
    run_dir = make_private_dir(Path(out_dir) if out_dir else default_run_dir())
    overrides = dict(parameters or {})
    declared = {p.stem: declared_parameters(p) for p in chosen} if overrides else {}
    unknown = [k for k in overrides if not any(k in d for d in declared.values())]
    if unknown:
        raise BadInput(f"-p: no chosen notebook declares {', '.join(unknown)}")
    results = []
    for path in chosen:
        params = dict(SMOKE_PARAMETERS.get(path.stem, {})) if smoke else {}
        params.update({k: v for k, v in overrides.items() if k in declared.get(path.stem, {})})
        start = time.perf_counter()
        error = ""
        ipynb = run_dir / f"{path.stem}.ipynb"
        try:
            ipynb = execute_notebook(path, run_dir, params)
        except Exception as exc:  # report per notebook; the caller decides the exit code
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        html_path = export_html(ipynb) if html and ipynb.exists() else None
        pngs: list[Path] = []
        if png_dir is not None and ipynb.exists():
            try:
                pngs = export_pngs(ipynb, Path(png_dir), only=png_only)
            except Exception as exc:  # recorded like a failed cell
                error = error or f"png export: {type(exc).__name__}: {exc}"
        results.append(NotebookResult(path.stem, ipynb, html_path, time.perf_counter() - start, error, tuple(pngs)))
    (run_dir / "summary.json").write_text(
        json.dumps(
            [
                {
                    "name": r.name,
                    "ipynb": r.ipynb.name,
                    "html": r.html.name if r.html else None,
                    "seconds": round(r.seconds, 2),
                    "error": r.error,
                    "pngs": [str(p) for p in r.pngs],
                }
                for r in results
            ],
            indent=2,
        )
    )
    return results


def save_results(out_dir: str, name: str, results: dict[str, Any]) -> Path | None:
    """Called from a notebook: write its key numbers as `<out_dir>/<name>.json` (nothing when out_dir is empty)."""
    if not out_dir:
        return None
    target = make_private_dir(Path(out_dir)) / f"{name}.json"
    target.write_text(json.dumps(results, indent=2, default=str))
    return target


class ConsoleCapture:
    """What a block prints (Python's and the C level's stdout and stderr: vLLM's warnings, its import-time lines)
    kept out of a notebook's output; `summary()` is the one line a notebook prints instead.

    The text is kept in `text`; `save(folder)` writes it as `console.log` (mode 0600) next to the run's `vllm.log`.
    """

    def __init__(self) -> None:
        self.text = ""

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.text.splitlines() if ln.strip()]

    def summary(self, log_path: str | Path | None = None) -> str:
        warnings = [ln for ln in self.lines if "WARNING" in ln or "Warning" in ln]
        where = f"; vLLM's own log: {log_path}" if log_path else ""
        return (
            f"console: {len(warnings)} warning lines ({len(set(warnings))} distinct), "
            f"{len(self.lines) - len(warnings)} other lines kept out of this notebook{where}"
        )

    def save(self, folder: str | Path) -> Path:
        from toolkit.private_fs import write_private_file

        return write_private_file(Path(folder) / "console.log", self.text)


@contextlib.contextmanager
def captured_console() -> Iterator[ConsoleCapture]:
    """Redirect stdout and stderr (file descriptors 1 and 2 and `sys.stdout`/`sys.stderr`) into a `ConsoleCapture`;
    if the block raises, its last 20 lines go to stderr with the error."""
    import io
    import sys
    import tempfile

    capture = ConsoleCapture()
    py_buffer = io.StringIO()
    with tempfile.TemporaryFile("w+b") as sink:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        saved = [os.dup(1), os.dup(2)]
        saved_py = (sys.stdout, sys.stderr)
        failed = False
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            sys.stdout = sys.stderr = py_buffer
            yield capture
        except BaseException:
            failed = True
            raise
        finally:
            sys.stdout, sys.stderr = saved_py
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            capture.text = py_buffer.getvalue() + sink.read().decode("utf-8", "replace")
            if failed:  # the block failed: what it printed last is the context of its error
                sys.stderr.write("\n".join(capture.lines[-20:]) + "\n")
