"""Stage 3, stores (device -> CPU): which blocks a step stores (selection.py, batch.py), per-request progress,
boundary hand-offs, the finish-time flush, and store events in flight until the workers report them."""
