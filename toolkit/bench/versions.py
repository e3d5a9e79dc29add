"""`kvtk bench versions`: the installed vLLM's own SimpleCPU against the toolkit on the CPU-pressure workload of the
differential tests (256 requests on 24 shared documents, tiny Qwen3-Next geometry, hash unit 128, 96 device blocks,
a 160-block CPU tier, 4-token outputs), the toolkit in each eviction policy and fine-grained store priority.

Prints, per connector setting, the CPU-tier (external) hit tokens, the tokens reused from the device and the CPU
tier together (what prefill saves), and the requests whose external hits differ from SimpleCPU's. Run it in each
venv of the version matrix (`.venv-vllm-0.33/bin/kvtk bench versions`) to compare releases; no timing is involved.
"""

from __future__ import annotations

import argparse
import json
import platform

from toolkit.host_cpu import cpu_model_name

SETTINGS = (("lru", "equal"), ("lru", "low"), ("slru", "equal"), ("slru", "low"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    parser.add_argument("--num-requests", type=int, default=256, help="requests in the trace (default 256)")


def run(args: argparse.Namespace) -> int:
    from toolkit import limits

    limits.check_int(args.num_requests, "--num-requests", 1, 100_000)
    result = measure(args.num_requests)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"vLLM {result['vllm']} ({result['model_runner']}); host {result['host']}")
    print(f"{'connector':<28}{'CPU-tier hit tokens':>21}{'device + CPU reused':>21}{'requests differing':>20}")
    for row in result["rows"]:
        print(f"{row['name']:<28}{row['external_hit_tokens']:>21,}{row['reused_tokens']:>21,}{row['differing']:>20}")
    return 0


def measure(num_requests: int) -> dict:
    from toolkit.bench.scheduler_vllm import TraceSpec, make_trace
    from toolkit.engines.harness import SHAPES, Harness, Phase, run_phases
    from toolkit.vllm.doctor import diagnose

    spec = TraceSpec(num_requests=num_requests, max_tokens=4)
    prompts = make_trace(spec)
    page = SHAPES[spec.shape].attention_page_bytes

    def one(connector: str, extra: dict) -> dict:
        harness = Harness(
            spec.shape,
            connector=connector,
            extra_config={"cpu_bytes_to_use": spec.cpu_blocks * page, **extra},
            prefix_match_unit=spec.prefix_match_unit,
            num_gpu_blocks=spec.num_gpu_blocks,
            max_num_batched_tokens=spec.max_num_batched_tokens,
        )
        return run_phases(harness, [Phase("trace", prompts, max_tokens=spec.max_tokens, wave=spec.wave)])["trace"]

    reference = one("simplecpu", {})
    runs = [("vLLM SimpleCPU", reference)]
    for eviction, priority in SETTINGS:
        extra = {"eviction_policy": eviction, "fine_store_priority": priority}
        runs.append((f"toolkit {eviction}, fine {priority}", one("toolkit", extra)))
    rows = []
    for name, records in runs:
        rows.append(
            {
                "name": name,
                "external_hit_tokens": sum(r.external_hit_tokens for r in records.values()),
                "reused_tokens": sum(r.local_hit_tokens + r.external_hit_tokens for r in records.values()),
                "differing": sum(records[k].external_hit_tokens != reference[k].external_hit_tokens for k in reference),
            }
        )
    found = diagnose()
    return {
        "vllm": found.vllm,
        "model_runner": found.model_runner,
        "host": f"{platform.machine()}, {cpu_model_name()}",
        "num_requests": num_requests,
        "rows": rows,
    }
