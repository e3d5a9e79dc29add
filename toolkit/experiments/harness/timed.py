"""Times the scheduler-side connector's hooks and tells the harness what each request was admitted with."""

from __future__ import annotations

import time

HOOKS = (
    "get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta", "update_connector_output",
    "request_finished", "request_finished_all_groups", "take_events", "has_pending_push_work",
    "get_kv_connector_stats",
)


def time_connector_hooks(harness, connector) -> None:
    """Replace the connector's hooks (on the instance) by wrappers that add their wall time to
    `harness._connector_seconds` and report local hits and admissions to the harness."""
    for name in HOOKS:
        original = getattr(connector, name, None)
        if original is not None:
            setattr(connector, name, _timed(harness, original, name))


def _timed(harness, fn, name):
    # Wall clock, not `time.thread_time`: a thread-CPU-time read is a system call (~15x `perf_counter`), which
    # the timing would add to every hook it measures. In `kvtk bench scheduler` the harness
    # drives the scheduler from one thread and nothing else runs in the process (the instant worker is inline),
    # so wall time inside a hook is that hook's work; other tenants' preemptions land on both sides alike (the
    # bench keeps the best of interleaved runs). With `worker="copy"`, copy threads may share the GIL and show.
    clock = time.perf_counter

    def timed(*args, **kwargs):
        start = clock()
        try:
            result = fn(*args, **kwargs)
        finally:
            harness._connector_seconds += clock() - start
        if name == "get_num_new_matched_tokens":
            harness._last_local[args[0].request_id] = args[1]
        elif name == "update_state_after_alloc":
            harness._on_admitted(args[0].request_id, args[2])
        return result

    timed.__name__ = name
    return timed
