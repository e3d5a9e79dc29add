"""What an engine reports of itself (`Engine.describe()`): one typed record, not a dict of keys listed in prose.

Every engine fills the geometry the runner, the bounds and the report read (block sizes in tokens, block and tier
sizes in blocks and bytes); a fact only some engines know is None for the others (the server cannot see vLLM's
groups; only the dry engine models copy rates or runs at a TP of its choosing). `to_json()` is the form a run folder
keeps (`params.json`'s "engine"); `from_json()` reads it back, old folders included (a key they lack is None).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from toolkit.errors import BadInput


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """One engine's geometry and capacities, as it runs (see the module docstring)."""

    engine: str  # "dry", "live" or "server"
    model: str
    variant: Mapping[str, Any]  # `VariantSpec.describe()`: the connector's options as it takes them (JSON values)
    hash_block_tokens: int
    scheduler_block_tokens: int
    blocks_per_scheduler_block: int  # device blocks one scheduler block takes over all groups
    cpu_block_bytes: int  # bytes one block id owns on one rank (0: the engine does not say)
    prefix_match_unit: int | None = None
    device_blocks: int | None = None
    device_tokens: int | None = None  # prompt tokens the device blocks hold, whole scheduler blocks
    cpu_blocks: int | None = None  # per rank; None: a server without the toolkit's connector (tier size unknown)
    cpu_bytes: int | None = None  # the server-wide CPU tier
    # Per KV cache group (vLLM's order): its block tokens, page bytes and spec kind (vLLM's class name).
    group_block_tokens: tuple[int, ...] | None = None
    group_page_bytes: tuple[int, ...] | None = None
    group_kinds: tuple[str, ...] | None = None
    model_dtype: str | None = None
    tp: int | None = None  # the dry engine's modelled parallelism
    dcp: int | None = None
    load_bytes_per_s: float | None = None  # the dry engine's modelled copy rates
    store_bytes_per_s: float | None = None
    url: str | None = None  # the server engine's endpoint, its served context and where its geometry came from
    max_model_len: int | None = None
    geometry_source: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The facts as `params.json` keeps them: one key per field, lists for the per-group tuples."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if f.name == "variant" else list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineFacts:
        """The facts a run folder kept (`to_json`); keys it does not know are ignored, a fact it lacks is None."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            values[f.name] = tuple(value) if isinstance(value, list) else value
            _check_type(f.name, str(f.type), values[f.name])
        for name in ("engine", "model", "hash_block_tokens", "scheduler_block_tokens", "blocks_per_scheduler_block"):
            if values.get(name) is None:
                raise BadInput(f"engine.{name}: missing from the run's engine description")
        values.setdefault("variant", {})
        values["cpu_block_bytes"] = values.get("cpu_block_bytes") or 0
        return cls(**values)


def _check_type(name: str, annotation: str, value: object) -> None:
    """A kept fact of the type its field says (a run folder is read back as untrusted input)."""
    if value is None and "None" in annotation:
        return
    kind = annotation.split(" ", 1)[0]
    expected: dict[str, tuple[type, ...]] = {
        "int": (int,),
        "float": (int, float),
        "str": (str,),
        "Mapping[str,": (dict,),
        "tuple[int,": (tuple,),
        "tuple[str,": (tuple,),
    }
    ok = isinstance(value, expected.get(kind, (object,))) and not isinstance(value, bool)
    if ok and isinstance(value, tuple):
        item = int if kind == "tuple[int," else str
        ok = all(isinstance(v, item) and not isinstance(v, bool) for v in value)
    if not ok:
        raise BadInput(f"engine.{name}: expected {annotation}, got {value!r:.80}")
