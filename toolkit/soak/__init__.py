"""The chaos soak: the live engine with the toolkit connector under mixed traffic (traffic.py) and injected faults,
and what it checks (checks.py): no hang, outputs equal to a no-connector reference, no leaked blocks. Entry: run.py.
"""
