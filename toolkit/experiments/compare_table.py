"""The comparison table's columns: what each is called ("TTFT p50 ms"), where its value comes from, how it is
printed; the text table the CLI prints and the CSV / parquet files with every column and the config flattened.

    rows = with_deltas(load_rows(folders))
    print(format_table(rows, over="seed"))          # seeds folded into mean ± 95% half-width
    write_tables(rows, Path("compare"), over="seed")  # compare.csv, compare.parquet
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from toolkit.experiments.compare import Row, TableRow, aggregate, ident_value, varying_config
from toolkit.experiments.metrics import NOT_MEASURED


@dataclass(frozen=True, slots=True)
class Column:
    name: str  # the CSV's column name
    header: str  # what the printed table calls it
    get: Callable[[Row], Any]
    kind: str  # "tokens", "pct", "ms", "ratio", "rate", "gb", "bytes"
    brief: bool = False  # printed on the terminal (every column goes to the CSV)


def _phase(key: str) -> Callable[[Row], Any]:
    return lambda row: row.phase.get(key)


def _derived(key: str) -> Callable[[Row], Any]:
    return lambda row: row.derived.get(key)


def _metric(key: str, fallback_s: str | None = None) -> Callable[[Row], Any]:
    """A metric from metrics.json; an older run without it: the summary's seconds where it has them, in ms."""

    def get(row: Row) -> Any:
        if key in row.metrics:
            return row.metrics[key]
        value = row.phase.get(fallback_s) if fallback_s else None
        return None if value is None else float(value) * 1e3

    return get


def _gb(key: str) -> Callable[[Row], Any]:
    return lambda row: None if row.phase.get(key) is None else row.phase[key] / 1e9


COLUMNS = (
    Column("prompt_tokens", "prompt tokens", _phase("prompt_tokens"), "tokens"),
    Column("device_hit_tokens", "device-hit tokens", _phase("local_hit_tokens"), "tokens"),
    Column("cpu_tier_tokens", "CPU-tier tokens", _phase("external_hit_tokens"), "tokens", True),
    Column("cpu_tier_pct", "CPU-tier % of prompt", _derived("cpu_tier_pct"), "pct", True),
    Column("cpu_tier_delta_vs_simplecpu", "CPU-tier vs SimpleCPU tokens", _derived("cpu_tier_delta_vs_simplecpu"), "tokens", True),
    Column("cpu_tier_delta_pct_vs_simplecpu", "CPU-tier vs SimpleCPU %", _derived("cpu_tier_delta_pct_vs_simplecpu"), "pct", True),
    Column("recomputed_tokens", "recomputed tokens", _phase("recomputed_tokens"), "tokens"),
    Column("recomputed_pct", "recomputed % of prompt", _derived("recomputed_pct"), "pct", True),
    Column("recomputed_delta_vs_no_offload", "recomputed vs no offload tokens", _derived("recomputed_delta_vs_no_offload"), "tokens", True),
    Column("oracle_tokens", "oracle tokens", _phase("oracle_reusable_tokens"), "tokens"),
    Column("hits_of_oracle", "hits / oracle", _phase("hit_fraction_of_oracle"), "ratio"),
    Column("ttft_mean_ms", "TTFT mean ms", _metric("ttft_mean_ms", "mean_ttft_s"), "ms"),
    Column("ttft_p50_ms", "TTFT p50 ms", _metric("ttft_p50_ms", "ttft_p50_s"), "ms", True),
    Column("ttft_p90_ms", "TTFT p90 ms", _metric("ttft_p90_ms", "ttft_p90_s"), "ms"),
    Column("ttft_p99_ms", "TTFT p99 ms", _metric("ttft_p99_ms", "ttft_p99_s"), "ms", True),
    Column("ttft_p50_delta_pct_vs_simplecpu", "TTFT p50 vs SimpleCPU %", _derived("ttft_p50_delta_pct_vs_simplecpu"), "pct"),
    Column("ttft_p50_delta_pct_vs_no_offload", "TTFT p50 vs no offload %", _derived("ttft_p50_delta_pct_vs_no_offload"), "pct"),
    Column("tpot_mean_ms", "TPOT mean ms", _metric("tpot_mean_ms"), "ms"),
    Column("tpot_p50_ms", "TPOT p50 ms", _metric("tpot_p50_ms"), "ms", True),
    Column("tpot_p99_ms", "TPOT p99 ms", _metric("tpot_p99_ms"), "ms"),
    Column("itl_mean_ms", "ITL mean ms", _metric("itl_mean_ms"), "ms"),
    Column("itl_p50_ms", "ITL p50 ms", _metric("itl_p50_ms"), "ms", True),
    Column("itl_p99_ms", "ITL p99 ms", _metric("itl_p99_ms"), "ms"),
    Column("e2e_mean_ms", "e2e mean ms", _metric("e2e_mean_ms"), "ms"),
    Column("e2e_p50_ms", "e2e p50 ms", _metric("e2e_p50_ms", "e2e_p50_s"), "ms"),
    Column("e2e_p99_ms", "e2e p99 ms", _metric("e2e_p99_ms", "e2e_p99_s"), "ms"),
    Column("output_tokens_per_s", "output tokens/s", _metric("output_tokens_per_s"), "rate"),
    Column("slo_met_pct", "SLO met %", lambda r: _pct(r.metrics.get("slo_met_fraction")), "pct"),
    Column("goodput_rps", "goodput req/s", _metric("goodput_rps"), "rate", True),
    Column("loaded_gb", "loaded GB", _gb("load_bytes"), "gb", True),
    Column("stored_gb", "stored GB", _gb("store_bytes"), "gb", True),
    Column("loaded_bytes_per_token", "loaded bytes per CPU-tier token", _metric("load_bytes_per_loaded_token"), "bytes"),
)  # fmt: skip
IDENT_HEADERS = {"run": "run", "variant": "variant", "phase": "phase", "cpu_gib": "tier GiB", "seed": "seed"}


def _pct(fraction: Any) -> float | None:
    return None if fraction is None else 100.0 * float(fraction)


def fmt(value: Any, kind: str) -> str:
    """Numbers as a reader wants them: thousands separators, units in the header, no spurious digits."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if kind == "tokens" or kind == "bytes":
        return f"{value:,.0f}"
    if kind == "pct":
        return f"{value:.1f}"
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "gb":
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def ident_columns(rows: list[Row], swept: list[str] | None) -> list[str]:
    """What tells the rows apart: the swept fields (else the config fields that differ, else the run), then variant
    and phase."""
    chosen = list(swept) if swept is not None else varying_config(rows)
    if not chosen and len({r.source for r in rows}) > 1:
        chosen = ["run"]
    return [*chosen, "variant", "phase"]


def table_rows(rows: list[Row], swept: list[str] | None, over: str | None) -> tuple[list[str], list[TableRow]]:
    idents = ident_columns(rows, swept)
    values = {c.name: c.get for c in COLUMNS}
    return [i for i in idents if i != over], aggregate(rows, values, idents, over)


def shown_columns(table: list[TableRow], brief: bool) -> list[Column]:
    """The columns with a value in some row: an engine that does not record a quantity gets no empty column."""
    return [c for c in COLUMNS if (c.brief or not brief) and any(t.values.get(c.name) is not None for t in table)]


def cell_text(t: TableRow, c: Column) -> str:
    text = fmt(t.values.get(c.name), c.kind)
    half = t.halfwidths.get(c.name)
    if half is None or not text or half == 0:  # a zero interval: the seeds gave the same value (the header says)
        return text
    return f"{text} ± {fmt(half, c.kind).lstrip('+')}"


def format_table(rows: list[Row], *, swept: list[str] | None = None, over: str | None = None) -> str:
    """The printed comparison: a header that states the SLO and what is missing, then one aligned row each."""
    if not rows:
        return "no finished runs to compare"
    idents, table = table_rows(rows, swept, over)
    columns = shown_columns(table, brief=True)
    headers = [IDENT_HEADERS.get(i, i) for i in idents] + [c.header for c in columns]
    body = [[_ident_text(t.ident.get(i)) for i in idents] + [cell_text(t, c) for c in columns] for t in table]
    widths = [max(len(h), *(len(r[k]) for r in body)) for k, h in enumerate(headers)]
    lines = header_lines(rows, table, over)
    lines.append(
        "  ".join(h.rjust(w) if k >= len(idents) else h.ljust(w) for k, (h, w) in enumerate(zip(headers, widths)))
    )
    for r in body:
        lines.append(
            "  ".join(v.rjust(w) if k >= len(idents) else v.ljust(w) for k, (v, w) in enumerate(zip(r, widths)))
        )
    return "\n".join(lines)


def _ident_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


def header_lines(rows: list[Row], table: list[TableRow], over: str | None) -> list[str]:
    slo = next((r.slo_text for r in rows if r.slo_text), None)
    engines = sorted({str(r.summary.get("engine")) for r in rows})
    clock = (
        "modelled (dry engine's virtual clock)"
        if engines == ["dry"]
        else "measured"
        if "dry" not in engines
        else "modelled (dry) and measured"
    )
    out = [f"{len(rows)} rows from {len({r.source for r in rows})} run(s); engines {', '.join(engines)}; times {clock}"]
    if slo:
        out.append(f"goodput: requests per second that meet the SLO {slo}")
    folded = max((t.n for t in table), default=1)
    if over and folded > 1:
        out.append(
            f"{over}s folded: mean ± 95% interval half-width (Student t) over {folded} {over}s; a value without ± "
            f"was the same for every {over}"
        )
    for engine in engines:
        missing = [f"{name} ({why})" for name, why in NOT_MEASURED.get(engine, {}).items()]
        if missing:
            out.append(f"not measured by this engine ({engine}): " + "; ".join(missing))
    return out


def write_tables(rows: list[Row], stem: Path, *, swept: list[str] | None = None, over: str | None = None) -> list[Path]:
    """`<stem>.csv` and `<stem>.parquet`: every column with a value, its 95% half-width where seeds were folded,
    and every config field of the row's run (owner-only files)."""
    import polars as pl

    from toolkit.private_fs import write_private_file, write_private_with

    idents, table = table_rows(rows, swept, over)
    config_of = _config_by_ident(rows, idents, over)
    records = []
    for t in table:
        record: dict[str, Any] = {i: _ident_text(t.ident.get(i)) for i in idents}
        record["runs"] = t.n
        for c in shown_columns(table, brief=False):
            record[c.name] = t.values.get(c.name)
            if over and t.n > 1:
                record[f"{c.name}_ci95"] = t.halfwidths.get(c.name)
        key = tuple(t.ident.get(i) for i in idents)
        record.update({f"config.{k}": _ident_text(v) for k, v in config_of.get(key, {}).items()})
        records.append(record)
    frame = pl.DataFrame(records, infer_schema_length=None)
    csv = write_private_file(stem.with_suffix(".csv"), frame.write_csv())
    parquet = write_private_with(stem.with_suffix(".parquet"), frame.write_parquet)
    return [csv, parquet]


def _config_by_ident(rows: list[Row], idents: list[str], over: str | None) -> dict[tuple[Any, ...], dict[str, Any]]:
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(ident_value(row, i) for i in idents)
        config = dict(row.config)
        if over:
            config.pop(over, None)
        out.setdefault(key, config)
    return out
