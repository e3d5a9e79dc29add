"""The hint schema (bad hints counted, never raised) and hint-aware eviction (retain, release, TTL, budget)."""

from __future__ import annotations

import math

import pytest

from toolkit.core.hints.book import HintBook
from toolkit.core.hints.schema import MAX_ACTIONS, HintKind, parse_envelope
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.hinted import HintedPolicy
from toolkit.core.pool.keys import BlockKey


def _action(kind: str, version: str = "1", **payload: object) -> dict[str, object]:
    return {"action_id": "a", "action_type": kind, "action_version": version, "payload": payload}


def _envelope(*actions: dict[str, object]) -> dict[str, object]:
    return {"protocol_version": "1", "message_id": "m", "actions": list(actions)}


def test_valid_actions_parse_with_their_fields() -> None:
    parsed = parse_envelope(
        _envelope(
            _action("retain", session_id="s", ttl_s=30, boundaries=2, issued_at_s=5.5),
            _action("release", session_id="s"),
            _action("pin", session_id="t"),
            _action("demote", session_id="t"),
            _action("prefetch", session_id="t"),
        )
    )
    assert not parsed.rejected and parsed.num_received == 5
    retain = parsed.actions[0]
    assert (retain.kind, retain.session_id, retain.ttl_s, retain.boundaries, retain.issued_at_s) == (
        HintKind.RETAIN,
        "s",
        30.0,
        2,
        5.5,
    )
    assert [a.kind.value for a in parsed.actions[1:]] == ["release", "pin", "demote", "prefetch"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "not_an_envelope"),
        ("retain", "not_an_envelope"),
        ({"actions": "x"}, "not_an_envelope"),
        (_envelope("x"), "not_an_action"),
        (_envelope(_action("evict", session_id="s")), "unknown_action"),
        (_envelope(_action("retain", version="2", session_id="s", ttl_s=1)), "unsupported_version"),
        (_envelope({"action_type": "release", "action_version": "1", "payload": [1]}), "bad_payload"),
        (_envelope(_action("release", session_id="s", ttl_s=1)), "unknown_field"),
        (_envelope(_action("release", session_id="")), "bad_session_id"),
        (_envelope(_action("release", session_id="x" * 257)), "bad_session_id"),
        (_envelope(_action("retain", session_id="s")), "bad_ttl"),
        (_envelope(_action("retain", session_id="s", ttl_s=math.nan)), "bad_ttl"),
        (_envelope(_action("retain", session_id="s", ttl_s=0)), "bad_ttl"),
        (_envelope(_action("retain", session_id="s", ttl_s=True)), "bad_ttl"),
        (_envelope(_action("pin", session_id="s", boundaries=0)), "bad_boundaries"),
        (_envelope(_action("pin", session_id="s", issued_at_s=-1)), "bad_time"),
    ],
)
def test_a_bad_hint_is_counted_by_reason_and_never_raises(raw: object, reason: str) -> None:
    parsed = parse_envelope(raw)
    assert parsed.actions == [] and parsed.rejected == {reason: 1}


def test_bad_actions_leave_the_good_ones_and_too_many_is_refused_whole() -> None:
    parsed = parse_envelope(_envelope(_action("release", session_id="s"), _action("nope", session_id="s")))
    assert [a.kind for a in parsed.actions] == [HintKind.RELEASE] and parsed.rejected == {"unknown_action": 1}
    flood = parse_envelope(_envelope(*[_action("release", session_id="s")] * (MAX_ACTIONS + 1)))
    assert flood.actions == [] and flood.rejected == {"too_many_actions": MAX_ACTIONS + 1}


# ----- eviction -------------------------------------------------------------------------------------------------


def _store(pool: CpuBlockPool, keys: list[BlockKey]) -> list[int]:
    """One completed store per key (allocate, cache, free), as the manager does it."""
    ids = pool.allocate([k.group_id for k in keys])
    pool.cache_and_free(ids, keys, [()] * len(ids))
    return ids


def _hashes(session: str, n: int) -> list[bytes]:
    return [f"{session}-{i}".encode() for i in range(n)]


def _keys(hashes: list[bytes]) -> list[BlockKey]:
    return [BlockKey(0, h) for h in hashes]


def _rig(num_blocks: int, policy: str = "lru+hints") -> tuple[CpuBlockPool, HintBook]:
    pool = CpuBlockPool(num_blocks, policy=policy)
    return pool, HintBook(pool, num_groups=1)


def _hint(book: HintBook, request_id: str, hashes: list[bytes], *actions: dict[str, object]) -> None:
    book.on_request(request_id, hashes, parse_envelope(_envelope(*actions)), now_s=0.0)


@pytest.mark.parametrize("base", ["lru", "slru"])
def test_retained_blocks_go_after_unhinted_ones_and_released_first(base: str) -> None:
    pool, book = _rig(9, f"{base}+hints")
    a, b, c = _hashes("a", 2), _hashes("b", 2), _hashes("c", 2)
    for hashes in (a, b, c):
        _store(pool, _keys(hashes))
    assert pool.num_free_blocks == 8
    _hint(book, "a1", a, _action("retain", session_id="A", ttl_s=100, issued_at_s=1))
    _hint(book, "c1", c, _action("release", session_id="C", issued_at_s=1))
    book.on_finished("c1", c)  # a releasing turn's own blocks are released when it leaves
    order = [pool.primary_key(b_id) for b_id in pool.iter_free() if pool.primary_key(b_id) is not None]
    # Released first (in prefix order), retained last (a prefix's deepest block before its head).
    assert order[:2] == _keys(c) and order[-2:] == _keys(a)[::-1], order
    victims = pool.allocate([0] * 7)  # everything but one block: the retained session's head
    held = [k for k in _keys(a + b + c) if k in pool]
    assert held == _keys(a)[:1], held
    assert len(victims) == 7


def test_a_retention_expires_on_the_orchestrators_clock_and_hits_are_counted() -> None:
    pool, book = _rig(5)
    a, b = _hashes("a", 2), _hashes("b", 2)
    _store(pool, _keys(a))
    _hint(book, "a1", a, _action("retain", session_id="A", ttl_s=10, issued_at_s=0))
    _store(pool, _keys(b))
    pool.touch([pool.lookup(_keys(a)[0])], hit=True)  # a lookup hit on a retained block
    pool.free([pool.lookup(_keys(a)[0])])
    assert book.stats.hits_on_retained_blocks == 1
    assert book.gauges()["retained_free_blocks"] == 2
    book.advance(9.9)
    assert book.gauges()["sessions_retained"] == 1
    book.advance(10.0)  # the TTL is up: the blocks join the unhinted ones (at the tail: as if freed now)
    assert book.gauges()["retained_free_blocks"] == 0 and book.stats.sessions_expired == 1
    c, d = _keys(_hashes("c", 2)), _keys(_hashes("d", 2))
    _store(pool, c)
    _store(pool, d)  # retained, a would have outlived c; expired, it goes before c
    assert [k in pool for k in _keys(a) + c + d] == [False, False, True, True, True, True]


def test_among_retained_sessions_the_one_needed_last_goes_first() -> None:
    pool, book = _rig(7)
    sessions = {"A": 30.0, "B": 10.0, "C": 20.0}  # each retention's end: when the orchestrator needs it again
    for name, ttl_s in sessions.items():
        hashes = _hashes(name, 2)
        _store(pool, _keys(hashes))
        _hint(book, name, hashes, _action("retain", session_id=name, ttl_s=ttl_s, issued_at_s=0))
    pool.allocate([0] * 4)  # A (needed at 30 s), then C (20 s) go; B, needed first, stays
    assert [k in pool for name in "ABC" for k in _keys(_hashes(name, 2))] == [False, False, True, True, False, False]
    _hint(book, "B2", _hashes("B", 2), _action("retain", session_id="B", ttl_s=100, issued_at_s=1))
    assert book.gauges()["retained_free_blocks"] == 2  # renewed in place


def test_the_budget_bounds_retained_blocks_so_unhinted_traffic_keeps_room() -> None:
    pool = CpuBlockPool(11, policy=HintedPolicy(CpuBlockPool(11).policy, budget_fraction=0.3))
    book = HintBook(pool, num_groups=1)
    hashes = _hashes("a", 6)
    _hint(book, "a1", hashes, _action("pin", session_id="A"))
    _store(pool, _keys(hashes))  # six pinned-session blocks, a budget of three
    gauges = book.gauges()
    assert gauges["budget_blocks"] == 3 and gauges["retained_free_blocks"] == 3
    assert gauges["budget_demoted_blocks"] == 3
    _store(pool, _keys(_hashes("x", 7)))  # unhinted traffic: takes the empty blocks and the three demoted ones
    assert [k in pool for k in _keys(hashes)] == [True] * 3 + [False] * 3  # the prefix's head stays retained


def test_a_plain_policy_counts_hints_as_not_applied() -> None:
    pool, book = _rig(5, "slru")
    _hint(book, "a1", _hashes("a", 1), _action("retain", session_id="A", ttl_s=1), _action("demote", session_id="A"))
    assert book.stats.accepted == 2 and book.stats.not_applied == 2 and book.policy is None


def test_unhinted_blocks_that_showed_reuse_outlast_hints_and_iteration_is_the_eviction_order() -> None:
    pool, book = _rig(13, "slru+hints")
    doc, one_off, sess, gone = _hashes("doc", 2), _hashes("x", 2), _hashes("s", 2), _hashes("g", 2)
    for hashes in (doc, one_off, sess, gone):
        _store(pool, _keys(hashes))
    doc_blocks = [pool.lookup(k) for k in _keys(doc)]
    pool.touch(doc_blocks, hit=True)  # unhinted, hit: SLRU protects it when freed
    pool.free(doc_blocks)
    _hint(book, "s1", sess, _action("retain", session_id="S", ttl_s=50, issued_at_s=1))
    _hint(book, "g1", gone, _action("release", session_id="G", issued_at_s=1))
    book.on_finished("g1", gone)
    order = list(pool.iter_free())
    named = [pool.primary_key(b) for b in order if pool.primary_key(b) is not None]
    # released, unhinted without reuse, retained (deepest first), unhinted with reuse
    assert named == _keys(gone) + _keys(one_off) + _keys(sess)[::-1] + _keys(doc), named
    for i, block_id in enumerate(order):  # a walk from any free block goes on in the same order
        assert list(pool.iter_free(block_id)) == order[i + 1 :]
    assert pool.allocate([0] * len(order)) == order
