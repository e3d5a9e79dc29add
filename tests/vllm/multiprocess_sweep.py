"""Run by test_multiprocess_lengths.py in a subprocess: the length sweep on one engine mode, results as JSON.

    python tests/vllm/multiprocess_sweep.py {inprocess|multiprocess} OUT.json LENGTH,LENGTH,...

Per length: a cold request (seeded random prompt, alone), the device cache reset (`LLM.reset_prefix_cache`, retried
while the connector's stores are in flight; a 1-token request steps the engine meanwhile), the same prompt again.
Everything goes through vLLM's public `LLM` interface, so the multiprocess engine core is reached only over IPC.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

CPU_BYTES = 256 << 20
RESET_TRIES = 100


def reset_device_cache(llm, live) -> int:
    for attempt in range(RESET_TRIES):
        if llm.reset_prefix_cache():
            return attempt
        live.generate(llm, [[5]], max_tokens=1)  # one engine step: lets finished stores complete
        time.sleep(0.01)
    raise RuntimeError(f"reset_prefix_cache refused {RESET_TRIES} times")


def main() -> None:
    mode, out, lengths = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = {"inprocess": "0", "multiprocess": "1"}[mode]
    from toolkit.vllm import live

    started = time.monotonic()
    llm = live.start_llm("tiny-qwen3-next", prefix_match_unit=128, extra={"cpu_bytes_to_use": CPU_BYTES})
    ready_s = time.monotonic() - started
    rows = []
    for length in lengths:
        prompt = [random.Random(length).randrange(3, 2000) for _ in range(length)]
        cold = live.generate(llm, [prompt], max_tokens=4)[0]
        reset_device_cache(llm, live)
        hot = live.generate(llm, [prompt], max_tokens=4)[0]
        identical, delta = live.compare([cold], [hot])
        rows.append(
            {
                "length": length,
                "cold_cached": cold.num_cached_tokens,
                "hot_cached": hot.num_cached_tokens,
                "tokens_equal": cold.token_ids == hot.token_ids,
                "identical": identical,
                "max_delta": delta,
            }
        )
    with open(out, "w") as handle:
        json.dump({"mode": mode, "ready_s": ready_s, "total_s": time.monotonic() - started, "rows": rows}, handle)
    live.shutdown(llm)


if __name__ == "__main__":  # the multiprocess engine core re-imports this module
    main()
