"""vLLM's own client against a server per variant: `vllm bench serve` on toolkit / vLLM's SimpleCPU / no offload.

    kvtk bench serve [--variants toolkit,simplecpu,none] [--datasets prefix_repetition,timed_trace] [--json]

For each variant a `kvtk serve` server starts on the tiny model (engine core and worker in their own processes,
the same device blocks and CPU-tier size for every variant); for each dataset vLLM's `vllm bench serve` runs a cold
pass, the device prefix cache is reset (`/reset_prefix_cache`, the CPU tier kept), and the same prompts run again
(hot). `prefix_repetition` is vLLM's generator (shared prefixes, random suffixes); `timed_trace` replays the first
requests of a Mooncake-format file scaled to the tiny model (`scale_mooncake`: a 512-token hash block becomes
`--chunk-tokens` tokens, arrivals compressed into `--trace-seconds`). Prompts are the same in both passes and for
every variant: vLLM's generators are seeded, and PYTHONHASHSEED is fixed for the timed trace (it seeds each
chunk's tokens with Python's string hash). Per pass: TTFT p50/p99 and output throughput as vLLM's client measured
them, and the prompt tokens served from the device cache and the CPU tier (deltas of vLLM's own counters
`vllm:prefix_cache_hits` and `vllm:external_prefix_cache_hits`, so SimpleCPU is measured the same way).
Numbers are wall-clock on this host: compare variants within one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.private_fs import make_private_dir, write_private_file

VARIANTS = ("toolkit", "simplecpu", "none")
DATASETS = ("prefix_repetition", "timed_trace")
DEFAULT_MOONCAKE = "../shared/traces/mooncake/synthetic_trace.jsonl"
MOONCAKE_BLOCK_TOKENS = 512
MAX_TRACE_REQUESTS = 4096  # bounds the scaled file before it is expanded


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="tiny-qwen3-next", help="a tiny model (default tiny-qwen3-next)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: toolkit, simplecpu, none")
    parser.add_argument(
        "--datasets", default=",".join(DATASETS), help="comma-separated: prefix_repetition, timed_trace"
    )
    parser.add_argument("--num-prompts", type=int, default=32, help="prompts per pass (default 32)")
    parser.add_argument("--max-concurrency", type=int, default=4, help="requests in flight (default 4)")
    parser.add_argument("--prefix-len", type=int, default=1024, help="prefix_repetition: shared prefix tokens")
    parser.add_argument("--suffix-len", type=int, default=256, help="prefix_repetition: per-prompt suffix tokens")
    parser.add_argument("--num-prefixes", type=int, default=4, help="prefix_repetition: distinct prefixes")
    parser.add_argument("--output-len", type=int, default=16, help="output tokens per request (default 16)")
    parser.add_argument("--trace", default=DEFAULT_MOONCAKE, help="timed_trace: a Mooncake-format .jsonl file")
    parser.add_argument(
        "--chunk-tokens",
        type=int,
        default=32,
        help="timed_trace: tokens per hash id after scaling (Mooncake's are 512; default 32)",
    )
    parser.add_argument(
        "--trace-seconds",
        type=float,
        default=10.0,
        help="timed_trace: the slice's arrivals compressed into this many seconds (default 10)",
    )
    parser.add_argument("--device-blocks", type=int, default=64, help="--num-gpu-blocks-override (default 64)")
    parser.add_argument("--cpu-gib", type=float, default=0.25, help="CPU tier size in GiB (default 0.25: 256 MiB)")
    parser.add_argument("--out", default=None, help="folder for logs and vLLM's result files (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def _names(value: str, valid: tuple[str, ...], field: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise BadInput(f"{field}: unknown {bad or value!r}; valid: {', '.join(valid)}")
    return names


def _check(args: argparse.Namespace) -> None:
    for field, low, high in (
        ("num_prompts", 1, 10_000),
        ("max_concurrency", 1, 256),
        ("prefix_len", 1, 8192),
        ("suffix_len", 1, 8192),
        ("num_prefixes", 1, 1024),
        ("output_len", 1, 1024),
        ("chunk_tokens", 1, 512),
        ("device_blocks", 8, 1 << 20),
    ):
        value = getattr(args, field)
        if not low <= value <= high:
            raise BadInput(f"--{field.replace('_', '-')}: must be {low}..{high}, got {value}")
    if not (math.isfinite(args.cpu_gib) and 0 < args.cpu_gib <= 2**20):
        raise BadInput(f"--cpu-gib: must be a positive number of GiB, got {args.cpu_gib}")
    if not (math.isfinite(args.trace_seconds) and args.trace_seconds > 0):
        raise BadInput(f"--trace-seconds: must be a positive number, got {args.trace_seconds}")


def scale_mooncake(
    path: str | Path,
    *,
    num_requests: int,
    chunk_tokens: int,
    max_input_tokens: int,
    max_output_tokens: int,
    span_s: float,
) -> list[dict]:
    """The first `num_requests` Mooncake records shrunk to a small model: lengths scaled by chunk_tokens / 512 (the
    hash ids kept, so shared prefixes stay shared), clipped to the model, arrivals compressed into `span_s`."""
    from toolkit.strict_load import iter_lines, json_loads

    if not 1 <= num_requests <= MAX_TRACE_REQUESTS:
        raise BadInput(f"num_requests: must be 1..{MAX_TRACE_REQUESTS}, got {num_requests}")
    records: list[dict] = []
    with open(path, "rb") as f:
        for number, line in enumerate(iter_lines(f, str(path)), 1):
            if len(records) == num_requests:
                break
            if not line.strip():
                continue
            rec = json_loads(line)
            if not isinstance(rec, dict):
                raise BadInput(f"{path}:{number}: a JSON object is needed, got {type(rec).__name__}")
            hash_ids = rec.get("hash_ids")
            if not isinstance(hash_ids, list) or not all(type(h) is int for h in hash_ids):
                raise BadInput(f"{path}:{number}: hash_ids: a list of integers is needed, got {hash_ids!r:.80}")
            for field in ("input_length", "output_length"):
                if type(rec.get(field)) is not int or not 0 <= rec[field] <= 1 << 24:
                    raise BadInput(
                        f"{path}:{number}: {field}: an integer 0..{1 << 24} is needed, got {rec.get(field)!r:.80}"
                    )
            if type(rec.get("timestamp", 0)) not in (int, float) or not math.isfinite(rec.get("timestamp", 0)):
                raise BadInput(
                    f"{path}:{number}: timestamp: a finite number is needed, got {rec.get('timestamp')!r:.80}"
                )
            length = rec["input_length"]
            scaled = max(1, min(max_input_tokens, math.ceil(length * chunk_tokens / MOONCAKE_BLOCK_TOKENS)))
            records.append(
                {
                    "timestamp": float(rec.get("timestamp", 0)),
                    "input_length": scaled,
                    "output_length": max(1, min(max_output_tokens, rec["output_length"])),
                    "hash_ids": hash_ids[: math.ceil(scaled / chunk_tokens)],
                }
            )
    if not records:
        raise BadInput(f"trace: {path} has no requests")
    first, last = records[0]["timestamp"], records[-1]["timestamp"]
    stretch = span_s / (last - first) if last > first else 0.0
    for rec in records:
        rec["timestamp"] = round((rec["timestamp"] - first) * stretch, 6)  # seconds
    return records


def _bench_argv(
    args, dataset: str, url: str, tokenizer: str, result_dir: Path, name: str, trace_file: Path | None
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "toolkit.serve.vllm_cli",
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--tokenizer",
        tokenizer,
        "--num-prompts",
        str(args.num_prompts),
        "--max-concurrency",
        str(args.max_concurrency),
        "--seed",
        "0",
        "--percentile-metrics",
        "ttft,tpot,e2el",
        "--metric-percentiles",
        "50,99",
        "--ignore-eos",
        "--save-result",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        f"{name}.json",
        "--dataset-name",
        dataset,
    ]
    if dataset == "prefix_repetition":
        argv += [
            "--prefix-repetition-prefix-len",
            str(args.prefix_len),
            "--prefix-repetition-suffix-len",
            str(args.suffix_len),
            "--prefix-repetition-num-prefixes",
            str(args.num_prefixes),
            "--prefix-repetition-output-len",
            str(args.output_len),
        ]
    else:
        argv += [
            "--dataset-path",
            str(trace_file),
            "--timed-trace-chunk-hash-size",
            str(args.chunk_tokens),
            "--timed-trace-sec-multiplier",
            "1",
        ]
    return argv


def _run_pass(argv: list[str], url: str, result_file: Path, log_path: Path) -> dict:
    from toolkit.serve.client import prefix_hit_counters

    before = prefix_hit_counters(url)
    env = {**os.environ, "PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1"}
    with open(log_path, "ab") as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve exited {done.returncode}; its output: {log_path}")
    time.sleep(0.5)  # the last step's stats reach /metrics with its outputs
    after = prefix_hit_counters(url)
    result = json.loads(result_file.read_text())
    return {
        "requests": result.get("completed"),
        "ttft_p50_ms": result.get("p50_ttft_ms", result.get("median_ttft_ms")),
        "ttft_p99_ms": result.get("p99_ttft_ms"),
        "output_tok_s": result.get("output_throughput"),
        "input_tokens": result.get("total_input_tokens"),
        "device_hit_tokens": int(after[0] - before[0]),
        "cpu_tier_tokens": int(after[1] - before[1]),
    }


def run(args: argparse.Namespace) -> int:
    from toolkit.serve.command import resolve_model

    variants = _names(args.variants, VARIANTS, "--variants")
    datasets = _names(args.datasets, DATASETS, "--datasets")
    _check(args)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kvtk-bench-serve-"))
    make_private_dir(out)
    trace_file = _write_timed_trace(args, out) if "timed_trace" in datasets else None
    tokenizer, _ = resolve_model(args.model)
    rows: list[dict] = []
    for variant in variants:
        rows.extend(_bench_variant(args, variant, datasets, tokenizer, out, trace_file))
    if args.json:
        print(json.dumps({"rows": rows, "out": str(out)}, indent=2))
    else:
        print(format_rows(rows))
        print(f"vLLM's result files and logs: {out}")
    return 0


def _write_timed_trace(args: argparse.Namespace, out: Path) -> Path:
    """The Mooncake file scaled to the tiny model, as the JSONL `vllm bench serve` replays (`timed_trace`)."""
    records = scale_mooncake(
        args.trace,
        num_requests=args.num_prompts,
        chunk_tokens=args.chunk_tokens,
        max_input_tokens=4096 - args.output_len - 1,
        max_output_tokens=args.output_len,
        span_s=args.trace_seconds,
    )
    trace_file = out / "timed_trace.jsonl"
    write_private_file(trace_file, "".join(json.dumps(r) + "\n" for r in records))
    return trace_file


def _bench_variant(args, variant: str, datasets: list[str], tokenizer: str, out: Path, trace_file) -> list[dict]:
    """Start one variant's server and run every dataset on it, cold then hot; one row per pass."""
    from toolkit.serve import client
    from toolkit.serve.command import build_serve_command
    from toolkit.serve.process import free_port, serving

    port = free_port()
    command = build_serve_command(
        args.model,
        [
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num-gpu-blocks-override",
            str(args.device_blocks),
            "--max-num-seqs",
            str(max(args.max_concurrency, 4)),
        ],
        connector=variant,
        cpu_bytes=int(args.cpu_gib * 2**30),
        environ=dict(os.environ),
    )
    rows = []
    print(f"bench serve: starting {variant} ({out / f'{variant}-server.log'})", file=sys.stderr)
    with serving(command, port=port, log_path=out / f"{variant}-server.log") as url:
        for dataset in datasets:
            client.reset_prefix_cache(url, reset_external=variant != "none")  # every dataset starts empty
            for phase in ("cold", "hot"):
                if phase == "hot":
                    client.reset_prefix_cache(url)  # the device cache only: hot reads the CPU tier
                name = f"{variant}-{dataset}-{phase}"
                argv = _bench_argv(args, dataset, url, tokenizer, out, name, trace_file)
                row = {
                    "variant": variant,
                    "dataset": dataset,
                    "phase": phase,
                    **_run_pass(argv, url, out / f"{name}.json", out / f"{variant}-bench.log"),
                }
                rows.append(row)
                print(f"bench serve: {name}: {row}", file=sys.stderr)
    return rows


def format_rows(rows: list[dict]) -> str:
    header = (
        f"{'variant':<10} {'dataset':<18} {'phase':<5} {'reqs':>5} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
        f"{'out tok/s':>10} {'input tok':>10} {'device hit':>11} {'CPU-tier':>9}"
    )
    lines = [header]
    for r in rows:

        def num(key, fmt):
            value = r.get(key)
            return format(value, fmt) if isinstance(value, (int, float)) else "-"

        lines.append(
            f"{r['variant']:<10} {r['dataset']:<18} {r['phase']:<5} {num('requests', 'd'):>5} "
            f"{num('ttft_p50_ms', '.1f'):>12} {num('ttft_p99_ms', '.1f'):>12} {num('output_tok_s', '.1f'):>10} "
            f"{num('input_tokens', 'd'):>10} {num('device_hit_tokens', 'd'):>11} {num('cpu_tier_tokens', 'd'):>9}"
        )
    return "\n".join(lines)
