"""The one plotting style: fixed colours per variant and group kind, group names, phase order, units, tables.

Every figure of `toolkit.viz` (and so every notebook and HTML report) takes its colours, names and ordering from
here, so a variant or a group kind looks the same in every notebook:

- `variant_color(name)`: a fixed colour per variant (unknown names get a stable colour from their name's CRC).
- `group_kind(kind)` / `group_color(kind)` / `group_names(kinds)`: a group's kind whatever spelling the source
  uses (`FullAttentionSpec`, `full_attention`, `MambaSpec`, `mamba_align`, ...), its colour, and per-run names
  ("full attention", "mamba 1", "mamba 2") instead of group numbers.
- `ordered_phases(phases)`: phases in run order (cold, hot, pressure, replay), never alphabetical.
- `axis_title(label, unit)`: every quantitative axis says its unit; `log_axis_type(values)`: log where values span
  two decades or more.
- `show_table(df)`: a table with all its rows and its full text (wrapped cells, horizontal scroll), in notebooks
  and HTML reports alike.
"""

from __future__ import annotations

import html
import math
import zlib
from typing import Iterable, Sequence

from toolkit.workloads.phase_names import PHASE_ORDER  # one run order for results and figures

STATE_COLORS = {
    "evictable": "#4C78A8",
    "pinned": "#F58518",
    "in flight": "#B279A2",
    "other": "#9D755D",
    "free": "#E5E5E5",
}
EVENT_COLORS = {"store": "#4C78A8", "load": "#54A24B", "handoff": "#B279A2", "drop": "#E45756"}
JOINT_HIT_COLOR = "#E45756"
TEMPLATE = "plotly_white"

# Variants: the toolkit blue, baselines in colours that never change between notebooks.
VARIANT_COLORS = {
    "toolkit": "#1F77B4",
    "no_offload": "#7F7F7F",
    "simplecpu": "#FF7F0E",
    "no_fine_grained": "#17BECF",
    "lazy": "#9467BD",
    "fine_equal_priority": "#8C564B",
    "corrupted_kv": "#D62728",
}
# Lines: a dash per variant too, so variants with equal values (overlapping lines) stay visible.
VARIANT_DASHES = {"toolkit": "solid", "no_offload": "dot", "simplecpu": "dash", "no_fine_grained": "dashdot"}
_FALLBACK = ("#BCBD22", "#E377C2", "#2CA02C", "#AEC7E8", "#FFBB78", "#98DF8A")

# Group kinds (one spelling per kind) and their colours.
GROUP_KIND_COLORS = {"full attention": "#4C78A8", "sliding window": "#72B7B2", "mamba": "#54A24B", "other": "#9D755D"}
_KIND_ALIASES = {
    "fullattentionspec": "full attention",
    "full_attention": "full attention",
    "attention": "full attention",
    "mlaattentionspec": "full attention",
    "chunkedlocalattentionspec": "sliding window",
    "slidingwindowspec": "sliding window",
    "sliding_window": "sliding window",
    "swa": "sliding window",
    "mambaspec": "mamba",
    "mamba_align": "mamba",
    "mamba_all": "mamba",
    "mamba": "mamba",
    "gdn": "mamba",
    "linear_attention": "mamba",
    "attn": "full attention",
    "mla": "full attention",
    "chunked_local": "sliding window",
}

# Bounds: one look for every line or marker that bounds an achieved value.
BOUND_COLOR = "#E45756"
PARTS_COLORS = {"CPU-tier hit": "#4C78A8", "device hit": "#72B7B2", "recomputed": "#E5E5E5"}


def variant_color(name: str) -> str:
    if name in VARIANT_COLORS:
        return VARIANT_COLORS[name]
    return _FALLBACK[zlib.crc32(name.encode()) % len(_FALLBACK)]


def variant_line(name: str) -> dict:
    """Plotly `line` settings of a variant: its colour, its dash, the main variant drawn widest."""
    return dict(
        color=variant_color(name), dash=VARIANT_DASHES.get(name, "longdash"), width=3.5 if name == "toolkit" else 2
    )


def group_kind(kind: str | None) -> str:
    """The kind's one spelling: "full attention", "sliding window", "mamba" or "other"."""
    key = (kind or "").strip().replace(" ", "_").lower().rstrip("0123456789").rstrip("_")  # "attn0", "mamba 2"
    return _KIND_ALIASES.get(key, _KIND_ALIASES.get(key.replace("_", ""), "other"))


def group_color(kind: str | None) -> str:
    return GROUP_KIND_COLORS[group_kind(kind)]


def group_names(kinds: Sequence[str | None]) -> list[str]:
    """Per group, its kind as a name, numbered only where a kind repeats: ["full attention", "mamba 1", ...]."""
    plain = [group_kind(k) for k in kinds]
    counts = {k: plain.count(k) for k in plain}
    seen: dict[str, int] = {}
    out = []
    for k in plain:
        seen[k] = seen.get(k, 0) + 1
        out.append(k if counts[k] == 1 else f"{k} {seen[k]}")
    return out


def ordered_phases(phases: Iterable[str]) -> list[str]:
    """Distinct phases in run order: the known ones in `PHASE_ORDER`, any others after them in first-seen order."""
    distinct = list(dict.fromkeys(phases))
    known = [p for p in PHASE_ORDER if p in distinct]
    return known + [p for p in distinct if p not in PHASE_ORDER]


def sort_phases(df, *, by: Sequence[str] = ("variant",)):
    """A polars frame sorted by `by` (first-seen order kept) then phase in run order."""
    import polars as pl

    rank = {p: i for i, p in enumerate(ordered_phases(df["phase"].to_list()))}
    keys = [c for c in by if c in df.columns]
    firsts = {c: {v: i for i, v in enumerate(dict.fromkeys(df[c].to_list()))} for c in keys}
    cols = [pl.col(c).replace_strict(firsts[c], return_dtype=pl.Int64).alias(f"__{c}") for c in keys]
    cols.append(pl.col("phase").replace_strict(rank, return_dtype=pl.Int64).alias("__phase"))
    return (
        df.with_columns(cols)
        .sort([f"__{c}" for c in keys] + ["__phase"], maintain_order=True)
        .drop([f"__{c}" for c in keys] + ["__phase"])
    )


def ordered_variants(names: Iterable[str]) -> list[str]:
    """The main variant first (the order they ran), baselines after it."""
    return list(dict.fromkeys(names))


def axis_title(label: str, unit: str) -> str:
    return f"{label} ({unit})"


def log_axis_type(values: Iterable[float | None], decades: float = 2.0) -> str:
    """ "log" when the positive values span `decades` or more, else "linear"."""
    positive = [float(v) for v in values if v is not None and v > 0]
    if len(positive) < 2:
        return "linear"
    return "log" if math.log10(max(positive) / min(positive)) >= decades else "linear"


def style_figure(fig, *, title: str | None = None, height: int = 400, legend_below: bool = False):
    """The house layout: template, margins, a readable font; returns `fig`."""
    fig.update_layout(
        template=TEMPLATE,
        height=height,
        margin=dict(l=70, r=20, t=60, b=60),
        font=dict(size=13),
        **({"title": title} if title else {}),
    )
    if legend_below:
        fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))
    return fig


def frame(rows_or_frame):
    """Accept a polars DataFrame or a list of row dicts; return a DataFrame."""
    import polars as pl

    if isinstance(rows_or_frame, pl.DataFrame):
        return rows_or_frame
    return pl.DataFrame(list(rows_or_frame))


TABLE_CSS = (
    "div.kvtk-table{overflow-x:auto;max-width:100%}"
    "table.kvtk-table{border-collapse:collapse;font-size:12px}"
    "table.kvtk-table td,table.kvtk-table th{border:1px solid #ccc;padding:3px 6px;white-space:normal;"
    "word-break:break-word;max-width:36em;vertical-align:top;text-align:right}"
    "table.kvtk-table td.text{text-align:left}"
)


def _cell_text(value) -> tuple[str, bool]:
    if value is None:
        return "", False
    if isinstance(value, float):
        return (f"{value:.4g}" if math.isfinite(value) else str(value)), False
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return f"{value:,}", False
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value), True
    return str(value), True


def table_html(df, *, caption: str = "") -> str:
    """Every row and the full text of every cell: wrapped cells, the table scrolls sideways when wide.

    The table carries `data-rows` (the frame's height) so a test can check that every row is shown.
    """
    df = frame(df)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.iter_rows():
        cells = []
        for value in row:
            text, is_text = _cell_text(value)
            cls = " class='text'" if is_text else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (
        f"<style>{TABLE_CSS}</style><div class='kvtk-table'><table class='kvtk-table' data-rows='{df.height}'>"
        f"{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


class Table:
    """A frame shown whole in a notebook (`_repr_html_`) and as plain text elsewhere."""

    def __init__(self, df, caption: str = "") -> None:
        self.df = frame(df)
        self.caption = caption

    def _repr_html_(self) -> str:
        return table_html(self.df, caption=self.caption)

    def __repr__(self) -> str:
        import polars as pl

        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=1000, tbl_width_chars=1000):
            return repr(self.df)


def show_table(df, caption: str = "") -> Table:
    return Table(df, caption)
