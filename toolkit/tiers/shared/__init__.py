"""The shared tier (issue 37): blocks in a store several engines share, below the disk tier.

The store is Mooncake Store's non-CUDA build over TCP (docs/shared-store.md says why and what runs):
`server.StoreServer` starts `mooncake_master` and a store process on loopback; `SharedTier.connect(config)` gives
the disk tier's shape (submit_write / submit_read / poll / contains / stats / close). Values carry a header and a
checksum (frame.py) and are keyed by the block key, the pool and the `CacheIdentity` digest, so engines of
different identities never share a block and a foreign or corrupted value is a counted miss. A store that is down,
slow or full is a counted miss or refused write, never a hang or an exception.
"""

from toolkit.tiers.disk.store import Refused  # the disk tier's reasons, shared by every lower tier
from toolkit.tiers.shared.config import SharedPool, SharedTierConfig, parse_store_url
from toolkit.tiers.shared.server import StoreServer
from toolkit.tiers.shared.stats import SharedTierStats
from toolkit.tiers.shared.tier import SharedTier

__all__ = [
    "Refused",
    "SharedPool",
    "SharedTier",
    "SharedTierConfig",
    "SharedTierStats",
    "StoreServer",
    "parse_store_url",
]
