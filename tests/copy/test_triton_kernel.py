"""The Triton gather/scatter kernel under the interpreter (TRITON_INTERPRET=1, CPU) against the torch reference.

The interpreter must be switched on before triton is imported, so the checks run in a fresh interpreter process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import os
    assert os.environ["TRITON_INTERPRET"] == "1"
    import torch
    from toolkit.copy.triton_backend import TritonCopyBackend, load_kernel_module
    from toolkit.copy import Direction, RegionPair
    k = load_kernel_module()
    g = torch.Generator().manual_seed(0)

    # 1. kernel vs reference, odd block counts, non-consecutive ids, several row sizes (one multi-chunk).
    for rows, row_bytes in ((13, 64), (9, 4096 + 8), (5, 3 * 4096 * 8 + 16)):
        src = torch.randint(-128, 128, (rows, row_bytes), dtype=torch.int8, generator=g)
        a = torch.randint(-128, 128, (7, row_bytes), dtype=torch.int8, generator=g)
        b = a.clone()
        src_ids, dst_ids = [rows - 1, 0, 3, 4], [6, 2, 0, 1]
        k.gather_scatter(src, a, src_ids, dst_ids)
        k.reference_gather_scatter(src, b, src_ids, dst_ids)
        assert torch.equal(a, b), row_bytes

    # 2. the launcher validates alignment, bounds and dtype, naming the field.
    src = torch.zeros(4, 64, dtype=torch.int8)
    for bad, field in (((src[:, :60], torch.zeros(4, 60, dtype=torch.int8), [0], [0]), "src"),
                       ((src, torch.zeros(4, 64, dtype=torch.int8), [0], [4]), "dst_ids"),
                       ((src, torch.zeros(4, 64, dtype=torch.int16), [0], [0]), "dst")):
        try:
            k.gather_scatter(*bad)
        except ValueError as exc:
            assert str(exc).startswith(field), (field, exc)
        else:
            raise AssertionError(f"{field}: no ValueError")
    try:
        k.copy_descriptors(torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int64),
                           torch.zeros(2, dtype=torch.int64))
    except ValueError as exc:
        assert str(exc).startswith("srcs"), exc
    else:
        raise AssertionError("int32 descriptors: no ValueError")
    # Descriptors are checked on the CPU, before upload: device tensors (here: meta) are refused, never read back.
    meta = torch.zeros(2, dtype=torch.int64, device="meta")
    try:
        k.check_descriptors(meta, meta, meta)
    except ValueError as exc:
        assert "validated on the CPU" in str(exc), exc
    else:
        raise AssertionError("meta descriptors: no ValueError")
    assert k.check_descriptors(*[torch.tensor([8, 16], dtype=torch.int64)] * 2,
                               torch.tensor([8, 4096 * 24], dtype=torch.int64)) == 24  # 4 KiB per program

    # 3. the backend (descriptors of several regions, runs coalesced) round-trips byte-exactly.
    dev = [torch.randint(-128, 128, (11, n), dtype=torch.int8, generator=g) for n in (512, 8192)]
    host = [torch.zeros(9, t.shape[1], dtype=torch.int8) for t in dev]
    backend = TritonCopyBackend(store_pairs=[RegionPair(name=str(i), src=d, dst=h)
                                             for i, (d, h) in enumerate(zip(dev, host))])
    saved = [d[[1, 2, 3, 10]].clone() for d in dev]
    backend.submit(direction=Direction.STORE, event_id=0, src_block_ids=[1, 2, 3, 10], dst_block_ids=[0, 1, 2, 8])
    backend.submit(direction=Direction.LOAD, event_id=1, src_block_ids=[0, 1, 2, 8], dst_block_ids=[4, 5, 6, 0])
    assert sorted((o.event_id, o.ok) for o in backend.poll()) == [(0, True), (1, True)]
    for d, s in zip(dev, saved):
        assert torch.equal(d[[4, 5, 6, 0]], s)
    print("TRITON-INTERPRET-OK")
    """
)


def test_triton_kernel_under_interpreter_matches_reference():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TRITON-INTERPRET-OK" in result.stdout
