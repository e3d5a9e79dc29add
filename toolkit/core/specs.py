"""Cache-group specs: what one KV cache group of a hybrid model looks like.

A hybrid model's KV cache is split into *groups*; every layer in a group has the same kind and the same block
geometry. This module describes one group; `geometry.py` combines groups into the block sizes the offload
manager works with. Pure Python: no torch, no vllm.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from toolkit.errors import BadInput


class GroupKind(str, enum.Enum):
    """The kinds of cache group the toolkit understands, named as in presets and on the command line."""

    FULL_ATTENTION = "full_attention"
    MLA = "mla"
    SLIDING_WINDOW = "sliding_window"
    CHUNKED_LOCAL = "chunked_local"
    MAMBA_ALIGN = "mamba_align"
    MAMBA_ALL = "mamba_all"

    @classmethod
    def parse(cls, value: str) -> "GroupKind":
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(k.value for k in cls)
            raise BadInput(f"kind: unknown cache-group kind {value!r}; valid kinds: {valid}") from None

    @property
    def scales_with_dcp(self) -> bool:
        """Full attention and MLA shard tokens across decode-context-parallel ranks, so one block spans DCP x tokens.

        Mamba state is replicated on every rank and windowed groups do not support DCP, so they are not scaled.
        """
        return self in (GroupKind.FULL_ATTENTION, GroupKind.MLA)

    @property
    def is_mamba(self) -> bool:
        return self in (GroupKind.MAMBA_ALIGN, GroupKind.MAMBA_ALL)

    @property
    def is_windowed(self) -> bool:
        return self in (GroupKind.SLIDING_WINDOW, GroupKind.CHUNKED_LOCAL)

    @property
    def positionally_stable(self) -> bool:
        """Whether "k-th block in the table holds tokens of block k" holds for the group's whole life.

        Mamba `align` tables null interior blocks and relocate states (copy-on-write), so a positional cursor
        could read a stale state under a valid key: such groups are stored only from boundary hand-offs.
        """
        return self is not GroupKind.MAMBA_ALIGN

    @property
    def fine_grained_capable(self) -> bool:
        """Whether the group's lookup can stop on a hash boundary inside one of its blocks.

        Windowed groups need every block inside the window at a block boundary, so they cannot (vLLM has no
        fine-grained sliding-window lookup either).
        """
        return self in (GroupKind.FULL_ATTENTION, GroupKind.MLA, GroupKind.MAMBA_ALIGN, GroupKind.MAMBA_ALL)


@dataclass(frozen=True, kw_only=True)
class CacheGroupSpec:
    """One cache group.

    Attributes:
        kind: the group's kind.
        block_tokens: the spec block size in tokens, before any decode-context-parallel scaling.
        page_bytes: bytes one block of this group occupies on one rank, summed over the group's layers.
        window_tokens: the sliding window (SWA) or the chunk (chunked local) in tokens; None for other kinds.
        num_layers: how many layers share this group (informational; page_bytes already sums them).
        name: a label for tables and figures.
    """

    kind: GroupKind
    block_tokens: int
    page_bytes: int = 0
    window_tokens: int | None = None
    num_layers: int = 1
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, GroupKind):
            object.__setattr__(self, "kind", GroupKind.parse(str(self.kind)))
        _require_positive_int("block_tokens", self.block_tokens, self.label)
        if not isinstance(self.page_bytes, int) or isinstance(self.page_bytes, bool) or self.page_bytes < 0:
            raise BadInput(f"page_bytes: must be a non-negative integer, got {self.page_bytes!r} ({self.label})")
        _require_positive_int("num_layers", self.num_layers, self.label)
        if self.kind.is_windowed:
            if self.window_tokens is None:
                raise BadInput(f"window_tokens: required for {self.kind.value} ({self.label})")
            _require_positive_int("window_tokens", self.window_tokens, self.label)
            if self.window_tokens < self.block_tokens:
                raise BadInput(
                    f"window_tokens: window {self.window_tokens} is smaller than one block of "
                    f"{self.block_tokens} tokens ({self.label})"
                )
        elif self.window_tokens is not None:
            raise BadInput(
                f"window_tokens: only sliding_window and chunked_local take a window, got {self.window_tokens} "
                f"for {self.kind.value} ({self.label})"
            )

    @property
    def label(self) -> str:
        return self.name or self.kind.value

    @property
    def window(self) -> int:
        """A windowed group's `window_tokens` (its presence is checked at construction); other kinds have none."""
        assert self.window_tokens is not None, f"{self.label}: {self.kind.value} has no window"
        return self.window_tokens

    def resolved_block_tokens(self, dcp: int) -> int:
        """Tokens one physical block of this group covers when decode context parallelism is `dcp`."""
        return self.block_tokens * dcp if self.kind.scales_with_dcp else self.block_tokens


def _require_positive_int(field: str, value: object, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadInput(f"{field}: must be a positive integer, got {value!r} ({where})")


def parse_groups_spec(spec: str) -> tuple[CacheGroupSpec, ...]:
    """Parse the command-line form `kind:block[/window][@page_bytes]`, comma separated.

    Example: `full_attention:16,mamba_align:64,sliding_window:16/128`.
    """
    if not spec or not spec.strip():
        raise BadInput("groups: empty group list; expected e.g. full_attention:16,mamba_align:64")
    groups = []
    for index, item in enumerate(spec.split(",")):
        item = item.strip()
        kind_text, sep, rest = item.partition(":")
        if not sep or not rest:
            raise BadInput(f"groups[{index}]: {item!r} is not kind:block[/window][@page_bytes]")
        page_bytes = 0
        if "@" in rest:
            rest, page_text = rest.split("@", 1)
            page_bytes = _parse_int(f"groups[{index}].page_bytes", page_text)
        block_text, _, window_text = rest.partition("/")
        groups.append(
            CacheGroupSpec(
                kind=GroupKind.parse(kind_text.strip()),
                block_tokens=_parse_int(f"groups[{index}].block_tokens", block_text),
                window_tokens=_parse_int(f"groups[{index}].window_tokens", window_text) if window_text else None,
                page_bytes=page_bytes,
                name=f"g{index}:{kind_text.strip()}",
            )
        )
    return tuple(groups)


def _parse_int(field: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise BadInput(f"{field}: {text!r} is not an integer") from None
