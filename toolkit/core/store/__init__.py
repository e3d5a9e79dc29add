"""Stage 3, stores (device -> CPU): which blocks a step stores (selection.py, batch.py), per-request progress
(request_progress.py), boundary hand-offs (handoffs.py), the finish-time flush (finish_flush.py), the room
fine-grained-only stores may take (fine_only.py), and store events in flight until the workers report them
(store_events.py)."""
