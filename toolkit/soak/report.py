"""The chaos soak's report: the outcomes compared with the reference run, the faults accounted, the leaks and RSS,
the verdict per check (`summarize`), and the table `kvtk soak` prints (`format_table`)."""

from __future__ import annotations

import dataclasses

from toolkit.engines.outputs import compare_output
from toolkit.soak.checks import LOGPROB_TOLERANCE, MIB, near_tie_at_first_difference


def summarize(*, traffic, engine, waves, soak, reference, observed, leaks, drain_error, block_bytes) -> dict:
    sent = [req for wave in waves for req in wave.requests]
    outputs = compare_outputs(sent, soak, reference)
    aborted = [o.aborted for o in soak.outcomes.values() if o.aborted]
    counters = observed["counters"]
    faults, faults_accounted = account_faults(observed)
    num_leaks = sum(1 for value in leaks.values() if value)
    checks = {
        "outputs_identical": outputs["tokens_identical"] + len(outputs["near_ties"]) == outputs["compared"],
        "logprobs_within_tolerance": outputs["max_abs_logprob_delta"] <= LOGPROB_TOLERANCE,
        "no_hangs": aborted.count("hang") == 0 and drain_error is None,
        "no_leaks": num_leaks == 0,
        "faults_accounted": faults_accounted,
        "resets_accepted": observed["resets_refused"] == 0,
    }
    return {
        "traffic": dataclasses.asdict(traffic),
        "engine": dataclasses.asdict(engine),
        "cpu_block_bytes": block_bytes,
        "requests": len(sent),
        "waves": len(waves),
        "completed": outputs["completed"],
        "compared": outputs["compared"],
        "tokens_identical": outputs["tokens_identical"],
        "logprobs_exact": outputs["logprobs_exact"],
        "max_abs_logprob_delta": outputs["max_abs_logprob_delta"],
        "inexact_with_equal_cached_tokens": outputs["inexact_with_equal_cached_tokens"],
        "differing_request_ids": outputs["differing"][:20],
        "near_tie_request_ids": outputs["near_ties"][:20],
        "aborts": {k: aborted.count(k) for k in ("load", "store")},
        "hangs": aborted.count("hang"),
        "hang_states": observed.get("hang_states", [])[:10],
        "drain_error": drain_error,
        "preemptions": observed["preemptions"],
        "evicted_keys": observed["evicted_keys"],
        "external_hit_tokens": counters.get("external_hit_tokens", 0),
        "faults": faults,
        "lookups_deferred_device_pool_tight": counters.get("lookups_deferred_device_pool_tight", 0),
        "resets": observed["resets"],
        "resets_refused": observed["resets_refused"],
        "leaks": leaks,
        "num_leaks": num_leaks,
        "rss_mib": rss_mib(observed["rss_per_wave"]),
        "seconds": {"soak": soak.seconds, "reference": reference.seconds},
        "checks": checks,
        "ok": all(checks.values()),
    }


def compare_outputs(sent, soak, reference) -> dict:
    """Each request completed in both runs, soak against reference: tokens, top-1 logprobs, near ties."""
    completed = compared = tokens_same = exact = inexact_same_cached = 0
    max_delta = 0.0
    differing: list[str] = []
    near_ties: list[str] = []
    for req in sent:
        got = soak.outcomes.get(req.request_id)
        if got is None or got.aborted:
            continue
        completed += 1
        ref = reference.outcomes.get(req.request_id)
        if ref is None or ref.aborted:
            continue
        compared += 1
        one = compare_output(got.token_ids, got.logprobs, ref.token_ids, ref.logprobs)
        if one.tokens_identical:
            tokens_same += 1
            exact += one.logprobs_exact
            inexact_same_cached += not one.logprobs_exact and got.num_cached_tokens == ref.num_cached_tokens
            max_delta = max(max_delta, one.max_abs_logprob_delta)
        elif near_tie_at_first_difference(got, ref, LOGPROB_TOLERANCE):
            near_ties.append(req.request_id)
        else:
            differing.append(req.request_id)
    return {
        "completed": completed,
        "compared": compared,
        "tokens_identical": tokens_same,
        "logprobs_exact": exact,
        "max_abs_logprob_delta": max_delta,
        "inexact_with_equal_cached_tokens": inexact_same_cached,
        "differing": differing,
        "near_ties": near_ties,
    }


def account_faults(observed: dict) -> tuple[dict, bool]:
    """The injected faults against what the scheduler was told and what vLLM recomputed; and whether they agree
    (every injected fault reported, every failed or declined load recomputed unless aborted first)."""
    injected, counters = observed["injected"], observed["counters"]
    needing = set(observed["failed_load_requests"]) | set(observed["declined"])
    recomputed = set(observed["recomputed"])
    not_recomputed = needing - recomputed - set(observed["aborted"])
    faults = {
        "load_injected": injected.get("load", 0),
        "load_events_reported": counters.get("load_events_failed", 0),
        "load_requests_failed": len(observed["failed_load_requests"]),
        "loads_declined": len(observed["declined"]),
        "recomputed": len(recomputed),
        "failed_not_recomputed": len(not_recomputed),
        "store_injected": injected.get("store", 0),
        "store_events_reported": counters.get("stores_failed", 0),
        "late_load_injected": injected.get("late_load", 0),
        "late_store_injected": injected.get("late_store", 0),
    }
    accounted = (
        faults["load_injected"] == faults["load_events_reported"]
        and faults["store_injected"] == faults["store_events_reported"]
        and not not_recomputed
        and recomputed <= needing
    )
    return faults, accounted


def rss_mib(rss: list[int]) -> dict:
    """RSS per wave in MiB: after warm-up (the first tenth of the waves), at the end, the growth and the peak."""
    warm = rss[min(len(rss) - 1, len(rss) // 10)] if rss else 0
    return {
        "after_warm_up": warm / MIB,
        "end": (rss[-1] if rss else 0) / MIB,
        "growth": ((rss[-1] - warm) if rss else 0) / MIB,
        "peak": max(rss, default=0) / MIB,
    }


def format_table(report: dict) -> str:
    f = report["faults"]
    rss = report["rss_mib"]
    rows = [
        ("requests (completed / compared)", f"{report['requests']} ({report['completed']} / {report['compared']})"),
        ("waves", report["waves"]),
        ("preemptions", report["preemptions"]),
        ("CPU-tier evictions (keys)", report["evicted_keys"]),
        ("external hit tokens", report["external_hit_tokens"]),
        (
            "CPU-tier loads deferred: device pool too tight to park now (lookups)",
            report.get("lookups_deferred_device_pool_tight", 0),
        ),
        (
            "load faults injected / reported / requests recomputed",
            f"{f['load_injected']} / {f['load_events_reported']} / {f['recomputed']} "
            f"({f['load_requests_failed']} failed + {f['loads_declined']} declined, {f['failed_not_recomputed']} not)",
        ),
        ("store faults injected / reported", f"{f['store_injected']} / {f['store_events_reported']}"),
        ("late copies injected (load / store)", f"{f['late_load_injected']} / {f['late_store_injected']}"),
        ("aborts (load / store in flight)", f"{report['aborts']['load']} / {report['aborts']['store']}"),
        ("resets (refused)", f"{report['resets']} ({report['resets_refused']})"),
        (
            "outputs identical (tokens / logprobs exact)",
            f"{report['tokens_identical']} / {report['logprobs_exact']} of {report['compared']} "
            f"(+{len(report['near_tie_request_ids'])} first differing at a reference near tie), "
            f"max |dlogprob| {report['max_abs_logprob_delta']:.3g} "
            f"({report['inexact_with_equal_cached_tokens']} inexact with equal cached tokens)",
        ),
        ("hangs", report["hangs"] + (1 if report["drain_error"] else 0)),
        ("leaks", report["num_leaks"]),
        (
            "RSS growth after warm-up (MiB)",
            f"{rss['growth']:+.1f} ({rss['after_warm_up']:.0f} -> {rss['end']:.0f}, peak {rss['peak']:.0f})",
        ),
        ("seconds (soak / reference)", f"{report['seconds']['soak']:.1f} / {report['seconds']['reference']:.1f}"),
        ("verdict", "OK" if report["ok"] else "FAILED: " + ", ".join(k for k, v in report["checks"].items() if not v)),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'metric':<{width}} | value", f"{'-' * width}-|------"]
    lines += [f"{name:<{width}} | {value}" for name, value in rows]
    return "\n".join(lines)
