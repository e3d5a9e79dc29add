"""Stage 4, loads (CPU -> device): pairing a hit's CPU blocks with allocated device blocks (pairing.py), the load
tracker that owns every copy's state, and parking of device blocks held by asynchronous loads."""
