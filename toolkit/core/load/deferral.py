"""Why a lookup tells the engine to keep a request waiting and ask again next step (its hit stays pinned): the
manager says which rule held it back, so the adapters count each where it belongs instead of lumping them."""

from __future__ import annotations

from enum import Enum


class Deferred(Enum):
    DEVICE_POOL_TIGHT = "device_pool_tight"  # loading now could leave every parked request unable to continue
    CPU_ROOM_FOR_DISK = "cpu_room_for_disk"  # its disk-held blocks found every CPU block pinned (room is coming)
