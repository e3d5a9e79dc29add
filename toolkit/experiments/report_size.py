"""`kvtk size`'s answer as text, JSON and a report section: per target (50/90/99% of the infinite tier's CPU-tier
tokens) the smallest tier size tried that reaches it and the size below it that does not, every run tried, the
warning where the tier per rank is below the device cache, and the curve (tier size against CPU-tier tokens, the
infinite tier's tokens as the ceiling) drawn by the same figure code as a grid's report.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from toolkit.experiments.sizing import SizeAnswer, SizeSearch

ANSWER_HEADERS = (
    "target % of infinite",
    "target tokens",
    "tier GiB",
    "CPU-tier tokens",
    "tier blocks per rank",
    "device blocks per rank",
    "falls short at GiB",
)
POINT_HEADERS = ("tier GiB", "CPU-tier tokens", "% of infinite", "tier blocks per rank", "run folder")


def answer_headers(search: SizeSearch) -> list[str]:
    """The answer table's headers: the tier searched names its size column (the disk's blocks are not shown)."""
    if search.ceiling is None:
        return list(ANSWER_HEADERS)
    return [h.replace("tier GiB", f"{search.tier} GiB").replace("tier blocks", "DRAM blocks") for h in ANSWER_HEADERS]


def answer_row(a: SizeAnswer) -> list[Any]:
    """One row of the answer table: None where the search found no size (the cells stay empty)."""
    r, s = a.reached, a.short
    return [
        100 * a.fraction,
        round(a.target_tokens),
        r.tier_gib if r else None,
        r.cpu_tier_tokens if r else None,
        r.cpu_blocks_per_rank if r else None,
        r.device_blocks_per_rank if r else None,
        s.tier_gib if s else None,
    ]


def notes(search: SizeSearch, phase: str) -> list[str]:
    """The lines under the table: what the infinite tier serves, how the sizes were found, the warnings."""
    inf = search.ceiling or search.infinite
    out = [
        f"infinite tier ({inf.tier_gib:,.4g} GiB of DRAM, holds the trace): {inf.cpu_tier_tokens:,} CPU-tier tokens in "
        f"the {phase} phase; device cache {inf.device_blocks_per_rank:,} blocks per rank",
        *_below_lines(search),
        f"{len(search.points) + (2 if search.ceiling else 0)} dry runs: halving from the infinite tier's size, then bisection on a log scale until "
        f"the size that reaches a target and the size below it that does not are within {100 * search.tolerance:g}% "
        f"(at most {search.max_runs} runs)",
    ]
    if inf.oracle_tokens is not None and inf.device_hit_tokens is not None:
        beyond = inf.oracle_tokens - inf.device_hit_tokens
        share = f" ({100 * inf.cpu_tier_tokens / beyond:.1f}% of them)" if beyond > 0 else ""
        out.append(
            f"the oracle (an infinite cache) reuses {inf.oracle_tokens:,} tokens in the {phase} phase; the device serves "
            f"{inf.device_hit_tokens:,}, which leaves {beyond:,} to a tier, and the infinite tier serves "
            f"{inf.cpu_tier_tokens:,}{share}: the targets are shares of what a tier can serve"
        )
    if inf.cpu_tier_tokens == 0:
        out.append(
            f"the infinite tier serves no token in the {phase} phase: the device cache holds all the reuse this trace "
            "has, so no tier size helps (a smaller --device-gib, or --phases cold,hot, asks another question)"
        )
    if search.hit_run_cap:
        out.append(
            f"stopped at --max-runs {search.max_runs}: some answers are wider than the tolerance (see 'falls short at')"
        )
    below = [a for a in search.answers if a.reached is not None and a.reached.below_device]
    if below and search.ceiling is not None:  # the DRAM tier is fixed; the tier below it is what is sized
        dram = below[0].reached
        assert dram is not None
        out.append(
            f"the DRAM tier holds fewer blocks per rank than the device cache ({dram.cpu_blocks_per_rank:,} < "
            f"{dram.device_blocks_per_rank:,}): as an inclusive tier it adds little alone; what it adds here comes "
            f"through the {search.tier} below it"
        )
    elif below:
        pcts = ", ".join(f"{100 * a.fraction:g}%" for a in below)
        smallest = below[0].reached
        assert smallest is not None
        reset = phase in ("hot", "replay")
        out.append(
            f"warning: at {pcts} the tier holds fewer blocks per rank ({smallest.cpu_blocks_per_rank:,} at "
            f"{100 * below[0].fraction:g}%) than the device cache ({smallest.device_blocks_per_rank:,}): an inclusive "
            "tier keeps copies of what the device holds, so it adds hits only for what the device has evicted"
            + (
                f"; the {phase} phase starts after a device reset, which is why it serves here"
                if reset
                else " (or after a reset)"
            )
        )
    alone = [f"{100 * a.fraction:g}%" for a in search.answers if a.reached is not None and a.reached.tier_gib == 0]
    if alone and search.ceiling is not None:
        out.append(f"{', '.join(alone)}: reached by {search.above or 'the DRAM tier'} alone, with no {search.tier}")
    least_gib = min(p.tier_gib for p in search.points)
    for a in search.answers:
        if a.reached is not None and a.short is None and a.reached.tier_gib > search.infinite.tier_gib / 2:
            out.append(f"{100 * a.fraction:g}%: only the largest size reaches it among the sizes tried")
    floor = [f"{100 * a.fraction:g}%" for a in search.answers if a.reached and 0 < a.reached.tier_gib <= least_gib]
    if floor and len(search.points) > 1:
        out.append(f"{', '.join(floor)}: reached by the smallest size tried (the tier's minimum or the run cap)")
    return out


def _below_lines(search: SizeSearch) -> list[str]:
    """A disk (or store) below fixed tiers: what they serve alone and with the largest one below, and what that
    misses."""
    if search.ceiling is None or search.base is None:
        return []
    most, base, top = search.ceiling_tokens, search.base, search.infinite

    def pct(tokens: int) -> str:
        return f"{100 * tokens / most:.1f}%" if most else "-"

    tier = search.tier
    above = search.above or f"{base.tier_gib:,.4g} GiB of DRAM"
    verb = "serve" if tier == "store" else "serves"  # a store's tiers above are DRAM and a disk
    out = [
        f"{above} alone {verb} {base.cpu_tier_tokens:,} ({pct(base.cpu_tier_tokens)}); with a "
        f"{tier} holding the trace below ({top.tier_gib:,.4g} GiB) {top.cpu_tier_tokens:,} ({pct(top.cpu_tier_tokens)})"
    ]
    missed = [f"{100 * a.fraction:g}%" for a in search.answers if a.reached is None and a.target_tokens > 0]
    if missed:
        out.append(
            f"no {tier} size reaches {', '.join(missed)}: even one holding the trace falls short (a hit whose {tier} "
            f"read is slower than recomputing is declined under --disk-load-rule cost; --{tier}-profile sets the "
            f"{tier}'s speed)"
        )
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_size_table(search: SizeSearch, phase: str) -> str:
    """The printed answer: one aligned row per target, then the notes."""
    body = [[_cell(v) for v in answer_row(a)] for a in search.answers]
    headers = answer_headers(search)
    widths = [max(len(h), *(len(r[k]) for r in body)) for k, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in body]
    return "\n".join(lines + notes(search, phase))


def size_document(search: SizeSearch, phase: str, setup: dict[str, Any]) -> dict[str, Any]:
    """size.json: the set-up, the answers, every run."""
    return {
        "setup": setup,
        "phase": phase,
        "tolerance": search.tolerance,
        "max_runs": search.max_runs,
        "infinite": asdict(search.infinite),
        "ceiling": _dict(search.ceiling),
        "base": _dict(search.base),
        "answers": [
            {
                "fraction": a.fraction,
                "target_tokens": a.target_tokens,
                "reached": _dict(a.reached),
                "short": _dict(a.short),
            }
            for a in search.answers
        ],
        "points": [asdict(p) for p in search.points],
        "notes": notes(search, phase),
    }


def _dict(point: Any) -> dict[str, Any] | None:
    return None if point is None else asdict(point)


def headline(search: SizeSearch, phase: str) -> str:
    what = "" if search.ceiling is None else f" (a {search.tier} below {search.above or 'the DRAM tier'})"
    parts = [
        f"{100 * a.fraction:g}% "
        + (f"at {a.reached.tier_gib:,.4g} GiB{what}" if a.reached.tier_gib else f"with no {search.tier}")
        for a in search.answers
        if a.reached is not None and a.target_tokens > 0
    ]
    if not parts:
        return f"No size reaches a target in the {phase} phase (see the notes)."
    return (
        f"Of the {search.ceiling_tokens:,} CPU-tier tokens an infinite tier serves in the {phase} phase: "
        + ", ".join(parts)
        + "."
    )


def write_size_report(folder: Path, search: SizeSearch, phase: str, setup: dict[str, Any], title: str) -> Path:
    """size.json and report.html in `folder` (owner-only)."""
    from toolkit.experiments.report_html import dict_table, figure_html, html_table, write_page
    from toolkit.private_fs import write_private_file

    write_private_file(folder / "size.json", json.dumps(size_document(search, phase, setup), indent=2))
    body = [f"<h1>{html.escape(title)}</h1>", f"<p class='headline'>{html.escape(headline(search, phase))}</p>"]
    body += [
        "<h2>Tier size per target</h2>",
        html_table(answer_headers(search), [answer_row(a) for a in search.answers]),
    ]
    body.append("<p>" + "<br>".join(html.escape(n) for n in notes(search, phase)) + "</p>")
    inf = search.ceiling_tokens
    ordered = sorted(search.points, key=lambda p: p.tier_gib)
    rows = [
        [
            p.tier_gib,
            p.cpu_tier_tokens,
            100 * p.cpu_tier_tokens / inf if inf else None,
            p.cpu_blocks_per_rank,
            p.run_dir,
        ]
        for p in ordered
    ]
    try:
        figure = _curve(search, phase, str(setup.get("connector") or "toolkit"))
        body += ["<h2>Tier size against CPU-tier tokens</h2>", figure_html(figure, "size", first=True)]
    except ImportError:  # without plotly the report keeps its tables
        pass
    headers = [
        h if search.ceiling is None else h.replace("tier GiB", f"{search.tier} GiB").replace("tier b", "DRAM b")
        for h in POINT_HEADERS
    ]
    body += ["<h2>Every run</h2>", html_table(headers, rows, text_columns=0)]
    body += ["<h2>Configuration</h2>", dict_table(setup)]
    return write_page(folder / "report.html", title, body)


def _curve(search: SizeSearch, phase: str, variant: str) -> Any:
    from toolkit.viz.report_figures import CapacityPoint, capacity_figure

    points = [
        CapacityPoint(variant, p.tier_gib, float(p.cpu_tier_tokens), ceiling_tokens=float(search.ceiling_tokens))
        for p in search.points
    ]
    return capacity_figure(points, phase=phase, title="CPU-tier tokens against the tier's size (kvtk size)")
