"""Stage 1, the pools: the CPU block pool (blocks.py), its free queues and eviction orders, group-tagged keys and
the model of the engine's device pool the manager reads."""
