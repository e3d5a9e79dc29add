"""What the shared-tier tests share: an identity, a config on a running server, and a raw store client that writes
values the tier did not (foreign, corrupted), as another engine or a broken one would."""

from __future__ import annotations

import pytest

from toolkit.tiers.disk import CacheIdentity, GroupGeometry
from toolkit.tiers.shared import SharedPool, SharedTierConfig
from toolkit.tiers.shared.backend import MooncakeClient, installed_binaries
from toolkit.tiers.shared.workers import Staging

BLOCK_BYTES = 256 << 10

needs_store = pytest.mark.skipif(
    installed_binaries() is None,
    reason="mooncake_master is not installed (the shared-store extra of pyproject.toml; `make setup` installs it)",
)


def identity(tp_size: int = 1, model: str = "tiny-hybrid") -> CacheIdentity:
    return CacheIdentity(
        model=model, model_config_hash="c0ffee", dtype="bfloat16",
        groups=(GroupGeometry("full_attention", 16, BLOCK_BYTES),), hash_unit_tokens=16, hash_algorithm="sha256",
        vllm_version="0.32.0", tp_size=tp_size, tp_rank=0, dcp_size=1, dcp_rank=0,
    )  # fmt: skip


def config(master: str, ident: CacheIdentity | None = None, **bounds: float) -> SharedTierConfig:
    return SharedTierConfig(master=master, identity=ident or identity(), pools=(SharedPool("attn", BLOCK_BYTES),),
                            **bounds)  # type: ignore[arg-type]  # fmt: skip


def payload(seed: int, size: int = BLOCK_BYTES) -> bytearray:
    """Deterministic, distinct per seed (a second process makes the same bytes)."""
    row = bytes((seed * 131 + n * 7) % 251 for n in range(4096))
    return bytearray((row * (size // 4096 + 1))[:size])


class RawStore:
    """The native client with one registered buffer: puts exactly the bytes given under a store key."""

    def __init__(self, master: str, size: int = 4 * BLOCK_BYTES) -> None:
        self.client, rc = MooncakeClient.setup(master, "127.0.0.1", 16 << 20)
        assert rc == 0
        self.staging = Staging(size)
        assert self.client.register(self.staging.address, size) == 0

    def put(self, store_key: str, value: bytes) -> int:
        self.staging.view[: len(value)] = value
        return self.client.put_from(store_key, self.staging.address, len(value))

    def get(self, store_key: str, size: int) -> bytes | int:
        got = self.client.get_into(store_key, self.staging.address, size)
        return got if got < 0 else bytes(self.staging.view[:got])

    def close(self) -> None:
        self.client.close()
