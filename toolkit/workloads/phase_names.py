"""The phases an experiment runs, in run order: one list for the config, the results and the figures (which sort by
it, never alphabetically: hot before cold would read as a regression)."""

PHASES = ("cold", "hot", "pressure", "replay")
# A run folder may also hold the live engine's warm-up prompt, first.
PHASE_ORDER = ("warmup", *PHASES)
