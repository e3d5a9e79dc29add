"""The shared tier's settings are checked before anything connects or allocates: one line naming the field."""

from __future__ import annotations

import pytest
from shared_rig import BLOCK_BYTES, identity

from toolkit.errors import BadInput
from toolkit.tiers.shared import SharedPool, SharedTierConfig, parse_store_url


def _config(**changes):
    fields = {"master": "127.0.0.1:50051", "identity": identity(), "pools": (SharedPool("attn", BLOCK_BYTES),)}
    return SharedTierConfig(**{**fields, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"master": "localhost"}, "master: give host:port"),
        ({"master": "127.0.0.1:70000"}, "master: give host:port"),
        ({"pools": ()}, "pools must hold 1-64"),
        ({"pools": (SharedPool("a/b", 16),)}, "pool name 'a/b'"),
        ({"pools": (SharedPool("a", 16), SharedPool("a", 32))}, "pool names must differ"),
        ({"pools": (SharedPool("a", 0),)}, "payload_bytes must be"),
        ({"queue_depth": 0}, "queue_depth must be 1-64"),
        ({"queue_depth": 64, "pools": (SharedPool("big", 128 << 20),)}, "staging"),
        ({"op_timeout_s": 0}, "op_timeout_s"),
        ({"local_buffer_bytes": 1024}, "local_buffer_bytes"),
        ({"failures_to_pause": 0}, "failures_to_pause"),
    ],
)
def test_bad_settings_are_one_line_naming_the_field(changes, message):
    with pytest.raises(BadInput, match=message) as raised:
        _config(**changes)
    assert "\n" not in str(raised.value)


def test_store_urls():
    assert parse_store_url("mooncake://127.0.0.1:50051") == "127.0.0.1:50051"
    assert parse_store_url("mooncake://store-0.local:7000") == "store-0.local:7000"
    for bad in ("redis://127.0.0.1:6379", "mooncake://127.0.0.1", "mooncake://h:0", "mooncake://a b:1"):
        with pytest.raises(BadInput, match="--store"):
            parse_store_url(bad)
    assert _config().in_flight_bound == 16 and _config(max_in_flight=3).in_flight_bound == 3
