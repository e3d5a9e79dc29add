"""The connectors' scheduler-side hooks counted by valgrind's callgrind instead of timed: instructions executed
inside the hooks, and the data reads that miss a simulated cache the size of one core's L2.

Wall time on a shared 2-vCPU VM moves by 10-50% between runs; the toolkit's count is the same on every run of the
same trace (SimpleCPU's moves by about 0.1%), so two versions of the connector can be compared to the instruction.
They are not the time: at prefill steps the toolkit executes fewer instructions per step than vLLM's SimpleCPU yet
takes longer, and the simulated L2 misses are where that difference shows (docs/performance.md, "Issue 40, counted instead of timed").

Each connector runs in its own child process under callgrind. The child makes the timed connector subclasses call
every hook through `operator.call` (`timed.mark_hook_calls`), and callgrind collects only inside that C function;
instrumentation starts after the imports (`callgrind_control -i on`), so vLLM's import is not simulated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

L2_CACHE_BYTES = 512 * 1024  # one core's L2 on the EPYC hosts here (8-way, 64-byte lines)
_TIMEOUT_S = 1800


def missing_tools() -> str | None:
    """What is missing to count: a valgrind program not on PATH, or `operator.call` (None: nothing)."""
    from toolkit.engines.harness.timed import CALL_MARKER_AVAILABLE

    if not CALL_MARKER_AVAILABLE:
        return "operator.call (Python 3.11+)"
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return tool
    return None


def count(connector: str, max_tokens: int, *, seed: int = 0, simulate_cache: bool = True) -> dict[str, Any]:
    """One connector's hooks over the bench trace (`scheduler_vllm.TraceSpec` with `max_tokens` output tokens):
    instructions and, with `simulate_cache`, last-level data read misses of an `L2_CACHE_BYTES` cache."""
    with tempfile.TemporaryDirectory(prefix="kvtk-callgrind-") as folder:
        out_file = Path(folder) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out_file}",
            "--instr-atstart=no",
            "--collect-atstart=no",
            f"--toggle-collect={_marker_symbol()}",
        ]
        if simulate_cache:
            command += ["--cache-sim=yes", f"--LL={L2_CACHE_BYTES},8,64"]
        command += [sys.executable, "-m", __name__, connector, str(max_tokens), str(seed)]
        # A fixed hash seed: set and dict orders, and so the hooks' work, are the same on every run. vLLM's warnings
        # (SimpleCPU logs one per stale lookup pin) are off: formatting log lines is not the connectors' work.
        env = {**os.environ, "PYTHONHASHSEED": "0", "VLLM_LOGGING_LEVEL": "ERROR"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S, env=env, check=False)
        if done.returncode != 0 or not out_file.exists():
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"callgrind run of {connector} failed (exit {done.returncode}): {tail[:400]}")
        events = read_totals(out_file.read_text(encoding="utf-8", errors="replace"))
    if not events.get("Ir"):  # the hooks were made before the marker was set: nothing framed, nothing counted
        raise RuntimeError(f"callgrind run of {connector}: no instruction counted inside {_marker_symbol()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    steps = max(1, int(result["steps"]))
    result["instructions"] = events.get("Ir", 0)
    result["instructions_per_step"] = events.get("Ir", 0) / steps
    if simulate_cache:
        result["l2_read_misses"] = events.get("DLmr", 0)
        result["l2_read_misses_per_step"] = events.get("DLmr", 0) / steps
    return result


def run_counted(args: Any) -> int:
    """`kvtk bench scheduler --instructions`: both connectors' hooks counted, one row per output length."""
    from toolkit.bench.scheduler_vllm import spec_of, sweep_of

    spec = spec_of(args)
    output_lengths = [spec.max_tokens] + [n for n in sweep_of(args) if n != spec.max_tokens and n > 0]
    missing = missing_tools()
    if missing is not None:
        print(f"kvtk bench scheduler: --instructions needs {missing}, not found", file=sys.stderr)
        return 2
    rows = []
    for max_tokens in output_lengths:
        counted = {c: count(c, max_tokens, seed=spec.seed) for c in ("toolkit", "simplecpu")}
        t, v = counted["toolkit"], counted["simplecpu"]
        rows.append(
            {
                "max_tokens": max_tokens,
                "toolkit": t,
                "vllm_simplecpu": v,
                "instructions_ratio_per_step": t["instructions_per_step"] / max(1e-9, v["instructions_per_step"]),
                "l2_read_misses_ratio_per_step": t["l2_read_misses_per_step"] / max(1e-9, v["l2_read_misses_per_step"]),
            }
        )
    if getattr(args, "json", False):
        print(
            json.dumps(
                {"trace": dict(spec.__dict__), "l2_cache_bytes": L2_CACHE_BYTES, "by_output_tokens": rows}, indent=2
            )
        )
        return 0
    print(
        f"hook instructions and simulated L2 read misses ({L2_CACHE_BYTES // 1024} KiB, 8-way) "
        f"per step, valgrind callgrind, one run each (deterministic); trace as `kvtk bench scheduler`:"
    )
    for row in rows:
        t, v = row["toolkit"], row["vllm_simplecpu"]
        print(
            f"  {row['max_tokens']:>4} tokens: toolkit {t['instructions_per_step'] / 1e3:7.1f} k instr/step, "
            f"{t['l2_read_misses_per_step']:7.1f} L2 misses/step over {t['steps']} steps; vLLM "
            f"{v['instructions_per_step'] / 1e3:7.1f} k, {v['l2_read_misses_per_step']:7.1f} over {v['steps']}; "
            f"ratio {row['instructions_ratio_per_step']:.2f} instr, {row['l2_read_misses_ratio_per_step']:.2f} misses; "
            f"external hit tokens {t['external_hit_tokens']} vs {v['external_hit_tokens']}"
        )
    return 0


def read_totals(text: str) -> dict[str, int]:
    """The event totals of a callgrind output file (its `events:` names and `summary:`/`totals:` numbers)."""
    names: list[str] = []
    values: list[int] = []
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            values = [int(v) for v in line.split()[1:]]
    if not names or not values:
        raise RuntimeError("callgrind output: no events/summary lines")
    return dict(zip(names, values))


def _marker_symbol() -> str:
    from toolkit.engines.harness.timed import CALL_MARKER_SYMBOL

    return CALL_MARKER_SYMBOL


def _child(connector: str, max_tokens: int, seed: int) -> None:
    """Under callgrind: one run of the bench trace with the hooks framed by the marker; prints one JSON line."""
    from toolkit.engines.harness import timed

    timed.mark_hook_calls()  # before vLLM's connector factory imports the timed subclasses
    from toolkit.bench.scheduler_vllm import TraceSpec, make_trace, run_one
    from toolkit.engines.harness import SHAPES, build_base_config

    spec = TraceSpec(max_tokens=max_tokens, seed=seed)
    base = build_base_config(SHAPES[spec.shape], max_num_batched_tokens=spec.max_num_batched_tokens)
    prompts = make_trace(spec)
    # Instrument from here: the imports above would otherwise be simulated too (minutes, and nothing counted).
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    # The toolkit reports its stats at most every `stats_interval_s` of wall time: under valgrind's ~50x slowdown a
    # second-long interval would report ~50x as often as in the real (about one second) run, and how often would
    # move with the host's load. With no interval it reports at the first step and whenever the engine goes idle,
    # as the real run nearly does, and the count is the same on every run.
    result = run_one(connector, spec, prompts, base, toolkit_extra={"stats_interval_s": 1e9})
    keep = ("connector", "steps", "external_hit_tokens", "reused_tokens")
    print(json.dumps({key: result[key] for key in keep}))


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
