"""Stage 2, the lookup: the longest boundary every cache group holds (hybrid.py), per-group probing (probe.py),
why it stopped (diagnostics.py), what it answers (result.py) and its view of the tier (tier_index.py)."""
