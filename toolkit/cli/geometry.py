"""`kvtk geometry`: per-group block sizes, hash and scheduler blocks, fine-grained eligibility, load plans."""

from __future__ import annotations

import argparse
import json

from toolkit.core.geometry import MIN_CPU_BLOCKS_PER_RANK, HybridGeometry, min_cpu_tier_bytes
from toolkit.core.specs import parse_groups_spec
from toolkit.engines.geometry_layout import check_parallel, default_hash_unit, parallel_notice
from toolkit.errors import BadInput
from toolkit.host_cpu import MODEL_DTYPES, live_model_dtype
from toolkit.models.names import resolve_model_name, unknown_name
from toolkit.models.presets import geometry_from_preset, list_presets, load_preset

EXAMPLES = """Examples:
  kvtk geometry --model qwen3-next-80b-a3b --prefix-match-unit 16
  kvtk geometry --model qwen3-next-80b-a3b --tp 4 --cpu-gib 512 --world-size 4
  kvtk geometry --groups full_attention:16,mamba_align:64 --dcp 2 --json"""


def tiny_model_names() -> set[str]:
    from toolkit.models.registry import list_models

    return {entry.name for entry in list_models()}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "geometry",
        help="show a hybrid model's KV-cache block geometry",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--groups",
        help="groups as kind:block[/window][@page_bytes],... "
        "e.g. full_attention:16,mamba_align:64,sliding_window:16/128",
    )
    source.add_argument(
        "--model",
        help=f"a model preset from data/models ({', '.join(list_presets())}), or a tiny model of `kvtk models "
        "list`, sized as the live engine allocates it (default: every preset)",
    )
    parser.add_argument("--dcp", type=int, default=1, help="decode-context-parallel size (default 1)")
    parser.add_argument("--pcp", type=int, default=1, help="prefill-context-parallel size (only 1 is supported)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size, for preset page bytes (default 1)")
    parser.add_argument(
        "--prefix-match-unit", dest="hash_block", type=int, default=None, help="hash unit in tokens (default: GCD)"
    )
    parser.add_argument("--platform", choices=("cuda", "cpu"), default="cuda", help="attention backend rules")
    parser.add_argument(
        "--dtype",
        choices=MODEL_DTYPES,
        default=None,
        help="model dtype (default: the preset's; auto with --model). auto, cpu platform only: "
        "what the live engines pick on this CPU, bfloat16 with AVX-512-BF16 or AMX, else float32",
    )
    parser.add_argument("--mamba-mode", choices=("align", "all"), default="align")
    parser.add_argument("--lazy", action="store_true", help="lazy store policy (turns fine-grained hits off)")
    parser.add_argument("--local-tokens", type=int, default=None, help="device-local prefix for a load plan")
    parser.add_argument("--external-tokens", type=int, default=None, help="external hit for a load plan")
    parser.add_argument("--cpu-gib", type=float, default=None, help="CPU pool budget (GiB) to size in blocks")
    parser.add_argument("--world-size", type=int, default=1, help="ranks sharing the CPU budget (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (a list for all presets)")
    parser.set_defaults(func=run)


def resolve_preset(args: argparse.Namespace, preset: str | None) -> dict | None:
    """The preset to size: a tiny model as the live engine builds it, or a committed preset, in `--dtype`."""
    if args.dtype == "auto" and args.platform != "cpu":
        raise BadInput(
            f"--dtype auto: decided by this host's CPU, so only with --platform cpu "
            f"(got --platform {args.platform}); name float32 or bfloat16"
        )
    if preset is not None and preset in tiny_model_names():
        from toolkit.models.engine_preset import live_preset

        # The live engine runs on the CPU; elsewhere the weights' own dtype.
        return live_preset(preset, dtype=args.dtype or ("auto" if args.platform == "cpu" else "bfloat16"))
    if preset is None:
        if args.dtype is not None:
            raise BadInput(f"--dtype {args.dtype}: --groups gives page bytes itself; use --dtype with --model")
        return None
    preset = resolve_model_name(preset)  # a preset's Hugging Face id names the preset
    if not preset.endswith(".json") and preset not in list_presets():
        raise BadInput(
            unknown_name("--model", "preset", preset, list_presets()) + "; or a tiny model (kvtk models list)"
        )
    try:
        loaded = load_preset(preset)
    except RecursionError:  # json's recursion on a deeply nested file: one line, not a traceback
        raise BadInput(f"preset: {preset} is nested too deeply to be a preset") from None
    if args.dtype is not None:
        loaded["dtype"] = live_model_dtype(args.dtype)
    return loaded


def check_args(args: argparse.Namespace) -> None:
    """Counts >= 1 and a finite CPU budget, before any preset is read (one line, exit 2, instead of a traceback)."""
    from toolkit import limits

    for name in ("dcp", "pcp", "tp", "world_size"):
        limits.check_int(getattr(args, name), f"--{name.replace('_', '-')}", 1, 1024)
    if args.hash_block is not None:
        limits.check_int(args.hash_block, "--prefix-match-unit", 1, limits.MAX_MODEL_LEN)
    for name in ("local_tokens", "external_tokens"):
        if getattr(args, name) is not None:
            limits.check_int(getattr(args, name), f"--{name.replace('_', '-')}", 0, limits.MAX_MODEL_LEN)
    if args.cpu_gib is not None:
        limits.check_float(args.cpu_gib, "--cpu-gib", 0.0, 2.0**20, min_open=True)


def build_geometry(args: argparse.Namespace, preset: dict | None) -> HybridGeometry:
    """The geometry; a preset's after the one TP/DCP checker replay, sweeps and notebooks run
    (`geometry_layout.check_parallel`). Custom `--groups` give page bytes themselves: TP does not apply."""
    if preset is not None:
        check_parallel(preset, tp=args.tp, dcp=args.dcp, pcp=args.pcp)
        try:
            return geometry_from_preset(
                preset,
                platform=args.platform,
                dcp=args.dcp,
                tp=args.tp,
                hash_block_tokens=args.hash_block,
                mamba_mode=args.mamba_mode,
                allow_fine_grained=not args.lazy,
            )
        except (KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError) as exc:
            # a preset file that is JSON but not a preset: say which one and what is wrong, not a traceback
            raise BadInput(f"preset {preset.get('name', '?')!r}: malformed ({type(exc).__name__}: {exc})") from None
    groups = parse_groups_spec(args.groups)
    return HybridGeometry(
        groups=groups, dcp=args.dcp, pcp=args.pcp, hash_block_tokens=args.hash_block, allow_fine_grained=not args.lazy
    )


def describe(args: argparse.Namespace, preset: str | None) -> dict:
    meta = resolve_preset(args, preset)
    geometry = build_geometry(args, meta)
    summary = geometry.describe()
    if meta is not None and args.hash_block is None and preset is not None and preset not in tiny_model_names():
        summary["replay_default_hash_block_tokens"] = default_hash_unit(meta["name"], args.tp, args.dcp)
    notice = parallel_notice(meta, tp=args.tp, dcp=args.dcp)
    if notice:
        summary["notice"] = notice
    if meta is not None:
        summary = {
            "preset": meta["name"],
            "display_name": meta.get("display_name", meta["name"]),
            "source": meta.get("source", ""),
            "dtype": meta.get("dtype", "bfloat16"),
            **summary,
        }
    if args.cpu_gib is not None:
        if args.cpu_gib <= 0:
            raise BadInput(f"--cpu-gib: must be positive, got {args.cpu_gib}")
        cpu_bytes = int(args.cpu_gib * 2**30)
        summary["cpu_pool"] = {
            "cpu_bytes": cpu_bytes,
            "world_size": args.world_size,
            "num_blocks": geometry.cpu_capacity_blocks(cpu_bytes, world_size=args.world_size),
            "min_cpu_bytes": min_cpu_tier_bytes(geometry.block_bytes, args.world_size),
        }
    if (args.local_tokens is None) != (args.external_tokens is None):
        raise BadInput("--local-tokens and --external-tokens: give both or neither")
    if args.local_tokens is not None:
        plan = geometry.load_plan(local_tokens=args.local_tokens, external_tokens=args.external_tokens)
        summary["load_plan"] = [
            {
                "group_id": p.group_id,
                "num_blocks": p.num_blocks,
                "gpu_start_index": p.gpu_start_index,
                "num_real_blocks": p.num_real_blocks,
                "bytes": p.bytes,
            }
            for p in plan
        ]
    return summary


def format_table(summary: dict) -> str:
    title = summary.get("display_name") or "custom groups"
    if summary.get("dtype"):
        title += f" ({summary['dtype']})"
    lines = [f"== {title}" + (f"  [{summary['source']}]" if summary.get("source") else "")]
    lines.append(f"{'group':>5} {'kind':<15} {'spec':>6} {'resolved':>8} {'window':>7} {'page bytes':>12}")
    for g in summary["groups"]:
        window = g["window_tokens"] if g["window_tokens"] is not None else "-"
        lines.append(
            f"{g['group_id']:>5} {g['kind']:<15} {g['spec_block_tokens']:>6} "
            f"{g['resolved_block_tokens']:>8} {window:>7} {g['page_bytes']:>12,}"
        )
    fine = summary["fine_grained"]
    lines.append(
        f"hash block {summary['hash_block_tokens']} tokens, scheduler block "
        f"{summary['scheduler_block_tokens']} tokens, DCP {summary['dcp']}, "
        f"block id = {summary['block_bytes']:,} bytes"
    )
    lines.append(
        "fine-grained hits: " + ("on (hits end on hash blocks)" if fine["enabled"] else f"off: {fine['reason']}")
    )
    if "replay_default_hash_block_tokens" in summary:
        unit = summary["replay_default_hash_block_tokens"]
        lines.append(
            f"kvtk replay's default hash unit here: {unit} tokens (fine-grained hits possible; --prefix-match-unit {unit})"
            if unit
            else "kvtk replay's default hash unit here: vLLM's (no smaller unit allows fine-grained hits)"
        )
    if summary.get("notice"):
        lines.append(summary["notice"])
    if "cpu_pool" in summary:
        pool = summary["cpu_pool"]
        lines.append(
            f"CPU pool: {pool['cpu_bytes']:,} bytes over {pool['world_size']} rank(s) = "
            f"{pool['num_blocks']:,} blocks per rank (the minimum: {pool['min_cpu_bytes']:,} bytes, "
            f"{pool['min_cpu_bytes'] / 2**30:.4g} GiB = {MIN_CPU_BLOCKS_PER_RANK} blocks per rank)"
        )
    for p in summary.get("load_plan", []):
        lines.append(
            f"  load group {p['group_id']}: {p['num_blocks']} block(s) from position {p['gpu_start_index']}"
            f", {p['num_real_blocks']} with data, {p['bytes']:,} bytes"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    presets = [args.model] if args.model else ([] if args.groups else list_presets())
    summaries = [describe(args, p) for p in presets] if presets else [describe(args, None)]
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    else:
        print("\n\n".join(format_table(s) for s in summaries))
    return 0
