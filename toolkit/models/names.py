"""Model names as a user types them: a preset, a tiny model, or the Hugging Face id of a preset's model.

`resolve_model_name("Qwen/Qwen3-Next-80B-A3B-Instruct")` is `"qwen3-next-80b-a3b"`: a preset's Hugging Face id (the
repository its `source` URL names, matched without regard to case) is an alias of the preset. Other names come back
unchanged, for the engine's own check to accept or refuse. `unknown_name` words the refusal, with a "did you mean"
(`difflib`) when a valid name is close, for models, traces and baselines alike.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import cache

from toolkit.models.presets import list_presets, presets_dir

_HF_SOURCE = re.compile(r"^https://huggingface\.co/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?:/|$)")


@cache
def _hf_aliases(folder: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in list_presets():
        try:
            source = json.loads((presets_dir() / f"{name}.json").read_text()).get("source", "")
        except (OSError, ValueError, AttributeError):
            continue  # a malformed preset is refused where it is loaded, with its own line
        match = _HF_SOURCE.match(source) if isinstance(source, str) else None
        if match:
            out[match.group(1).lower()] = name
    return out


def hf_aliases() -> dict[str, str]:
    """Lower-cased Hugging Face id -> preset name, for every preset whose `source` is a huggingface.co URL."""
    return _hf_aliases(str(presets_dir()))


def resolve_model_name(name: str) -> str:
    """The preset a Hugging Face id names (any case); every other name unchanged."""
    if not isinstance(name, str) or "/" not in name:
        return name
    return hf_aliases().get(name.strip().lower(), name)


def did_you_mean(word: str, valid: list[str] | tuple[str, ...]) -> str:
    """`" (did you mean 'x'?)"` for the closest valid name, or `""` when none is close."""
    if not isinstance(word, str) or not word:
        return ""
    lowered = {v.lower(): v for v in valid}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def unknown_name(field: str, kind: str, word: str, valid: list[str] | tuple[str, ...], listed: str = "") -> str:
    """One line: `field: unknown KIND 'word' (did you mean 'x'?); valid KINDs: ...` (`listed` replaces the list)."""
    return f"{field}: unknown {kind} {word!r}{did_you_mean(word, valid)}; valid {kind}s: {listed or ', '.join(valid)}"
