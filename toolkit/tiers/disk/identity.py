"""The cache identity: everything that decides what the bytes of a stored block mean.

A block key (a prefix hash) names *which tokens* a block holds; the identity names *how* they were turned into
bytes. Two runs whose identities differ in any field must never share blocks, however equal their keys (LMCache
issue 4492: every request corrupted across a restart of a hybrid model), so the disk tier stores the identity in
its manifest and a digest of it in every slot header, and reuses nothing when a field differs, naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from toolkit.errors import BadInput
from toolkit.limits import MAX_NAME_CHARS

# Bumped whenever the slot header, the commit log or the manifest change shape.
DISK_FORMAT_VERSION = 1
MAX_GROUPS = 64
_MAX_TEXT_CHARS = 256


@dataclass(frozen=True, slots=True)
class GroupGeometry:
    """One KV cache group as stored: its kind, how many tokens a block holds and its bytes per block."""

    kind: str  # "full_attention", "sliding_window", "mamba", ...
    block_tokens: int
    block_bytes: int


@dataclass(frozen=True, slots=True)
class CacheIdentity:
    model: str
    model_config_hash: str
    dtype: str
    groups: tuple[GroupGeometry, ...]
    hash_unit_tokens: int
    hash_algorithm: str
    vllm_version: str
    tp_size: int
    tp_rank: int
    dcp_size: int
    dcp_rank: int
    format_version: int = DISK_FORMAT_VERSION

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and not 0 < len(value) <= _MAX_TEXT_CHARS:
                raise BadInput(f"cache identity: {f.name} must be 1-{_MAX_TEXT_CHARS} characters, got {value!r:.60}")
        if not 0 < len(self.groups) <= MAX_GROUPS:
            raise BadInput(f"cache identity: groups must hold 1-{MAX_GROUPS} groups, got {len(self.groups)}")
        for n, group in enumerate(self.groups):
            if not 0 < len(group.kind) <= MAX_NAME_CHARS or group.block_tokens < 1 or group.block_bytes < 1:
                raise BadInput(f"cache identity: groups[{n}] is not a valid group: {group!r:.120}")
        if not (0 <= self.tp_rank < self.tp_size and 0 <= self.dcp_rank < self.dcp_size):
            raise BadInput(
                f"cache identity: rank layout tp {self.tp_rank}/{self.tp_size}, dcp {self.dcp_rank}/{self.dcp_size}"
                " is out of range"
            )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> bytes:
        """16 bytes that every slot header carries: a slot of another identity is never served."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    @classmethod
    def from_json(cls, data: Any) -> CacheIdentity:
        """Parse a manifest's identity; anything malformed is a BadInput (the caller then discards the store)."""
        if not isinstance(data, dict):
            raise BadInput(f"cache identity: must be an object, got {type(data).__name__}")
        names = {f.name: f for f in dataclasses.fields(cls)}
        if set(data) != set(names):
            raise BadInput(f"cache identity: fields {sorted(set(data) ^ set(names))} missing or unknown")
        groups = data["groups"]
        if not isinstance(groups, (list, tuple)) or len(groups) > MAX_GROUPS:
            raise BadInput("cache identity: groups must be a list")
        parsed = []
        for group in groups:
            if not isinstance(group, dict) or set(group) != {"kind", "block_tokens", "block_bytes"}:
                raise BadInput(f"cache identity: a group must have kind, block_tokens, block_bytes: {group!r:.80}")
            parsed.append(GroupGeometry(_typed(group, "kind", str), *(_typed(group, k, int) for k in _INTS_G)))
        values = {
            name: _typed(data, name, str if f.type == "str" else int) for name, f in names.items() if name != "groups"
        }
        return cls(groups=tuple(parsed), **values)


_INTS_G = ("block_tokens", "block_bytes")


def _typed(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data[name]
    if type(value) is not kind:
        raise BadInput(f"cache identity: {name} must be {kind.__name__}, got {value!r:.60}")
    return value


def differences(old: CacheIdentity, new: CacheIdentity) -> list[str]:
    """`field: old -> new` for each field that differs (groups as a whole), in declaration order."""
    out = []
    for f in dataclasses.fields(CacheIdentity):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before != after:
            if f.name == "groups":
                before = [dataclasses.astuple(g) for g in before]
                after = [dataclasses.astuple(g) for g in after]
            out.append(f"{f.name}: {before!r:.80} -> {after!r:.80}")
    return out
