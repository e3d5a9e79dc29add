"""The disk tier's counters reach vLLM's stats and Prometheus as `vllm:kvtk_disk_blocks_total{move}` deltas."""

from toolkit.vllm.metrics import COUNTER, stats_delta


def test_disk_moves_are_reported_as_interval_deltas_by_move():
    before = {"counters": {"disk_demote_blocks": 4, "disk_promote_blocks": 1}}
    now = {"counters": {"disk_demote_blocks": 10, "disk_promote_blocks": 1, "disk_reads_failed": 2}}
    series = stats_delta(now, before).data[COUNTER]["disk_blocks"]
    assert series == {"demoted": 6, "read_failed": 2}  # no move, no series: promoted did not change
