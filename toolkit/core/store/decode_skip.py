"""The decode-step skip: when a step of running requests cannot give any of them positional store work.

Decode steps run the same requests step after step, each a token further from its next block end. After a full
scan of the running requests (`RequestStores.select`), `rescanned` records the fewest tokens any of them still
needs before it has work (a lower bound on `next_work_tokens - num_computed_tokens`: the slack). While the same
ids run with no new block and none resumed, each step spends its largest token advance from the slack, and the
scan is skipped while some remains.

One object, a pure query and an explicit spend: `skippable_advance(running)` says whether this step may skip
(and with what advance) and changes nothing; the caller that takes the skip calls `spend(advance)`.
"""

from __future__ import annotations

from typing import Sequence

from toolkit.core.requests import RunningColumns

CANNOT_SKIP = -1


class DecodeSkip:
    __slots__ = ("_ids", "_slack_tokens", "_last_advance_tokens")

    def __init__(self) -> None:
        self._ids: list[str] | None = None  # the running ids of the last full scan (None: no scan to trust)
        self._slack_tokens = 0
        self._last_advance_tokens = 0  # the largest number of tokens scheduled to one request in the last step

    def skippable_advance(self, running: RunningColumns) -> int:
        """This step's advance if the scan may be skipped (the same ids as at the last full scan, no new block, no
        resumed request, and slack left after spending), else `CANNOT_SKIP`. Changes nothing."""
        new_block_ids, counts = running.new_block_ids, running.num_scheduled_tokens
        if running.req_ids != self._ids or running.resumed_ids or new_block_ids.count(None) != len(new_block_ids):
            return CANNOT_SKIP
        advance = max(counts.values()) if counts else 0
        # Tokens may be counted at the step that scheduled them or at the next one: spend the larger of the two.
        spent = advance if advance > self._last_advance_tokens else self._last_advance_tokens
        return advance if spent < self._slack_tokens else CANNOT_SKIP

    def spend(self, advance: int) -> None:
        """Take the skip `skippable_advance` allowed: its tokens leave the slack."""
        last = self._last_advance_tokens
        self._slack_tokens -= advance if advance > last else last
        self._last_advance_tokens = advance

    def scanned_step(self, running: RunningColumns | None) -> None:
        """A step that was not skipped: remember its advance (the next step may count these tokens)."""
        counts = running.num_scheduled_tokens if running is not None else None
        self._last_advance_tokens = max(counts.values()) if counts else 0

    def rescanned(self, req_ids: Sequence[str], slack_tokens: int) -> None:
        """A full scan of `req_ids` found every one at least `slack_tokens` away from positional work."""
        self._ids = list(req_ids)
        self._slack_tokens = slack_tokens

    def forget(self) -> None:
        """No scan to trust (no request tracked, a step without running columns, a reset)."""
        self._ids = None
