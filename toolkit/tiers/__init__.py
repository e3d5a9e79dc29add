"""Tiers below host memory (issue 37): stores the CPU tier can cascade into.

`toolkit.tiers.disk` is the first: fixed-size block slots in preallocated files on a local file system, read and
written with O_DIRECT at a real queue depth, restart-safe and keyed by a cache identity. It imports only the
toolkit's base helpers (errors, limits, private files): the connector's core and worker side call into it, never
the other way round.
"""
