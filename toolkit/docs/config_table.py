"""The connector's `kv_connector_extra_config` table, generated from `toolkit/vllm/config.py` (its one source).

The table lives in docs/connector.md between the two marker comments below; `kvtk docs config` rewrites it there,
`kvtk docs config --check` (and tests/docs) fail when the committed table differs from the generated one.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import toolkit
from toolkit.errors import BadInput

BEGIN_MARKER = "<!-- BEGIN GENERATED: connector config table (kvtk docs config) -->"
END_MARKER = "<!-- END GENERATED: connector config table -->"
CONFIG_SOURCE = Path(toolkit.__file__).resolve().parent / "vllm" / "config.py"
# The docs page the table is generated into, found from a checkout (an installed wheel ships no docs/).
DEFAULT_DOC = Path(toolkit.__file__).resolve().parent.parent / "docs" / "connector.md"
# Keys that are no ConnectorConfig field with a default: key -> the module constant parse_config falls back to.
_DEFAULT_CONSTANT_OF_KEY = {"cpu_bytes_to_use": "DEFAULT_CPU_BYTES"}
GIB = 1024**3


def load_config_module() -> ModuleType:
    """`toolkit/vllm/config.py` without `toolkit/vllm/__init__.py`, which imports vLLM: config.py itself imports
    only the standard library, so the table can be generated where vLLM is not installed."""
    loaded = sys.modules.get("toolkit.vllm.config")
    if loaded is not None:
        return loaded
    name = "_kvtk_docs_connector_config"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CONFIG_SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def format_default(value: Any) -> str:
    """A default as the user writes it in JSON: `true`, `"slru"`, `1.0`; byte counts also in GiB."""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int) and value >= GIB and value % GIB == 0:
        return f"{value // GIB} GiB (`{value}`)"
    return f"`{value!r}`"


def option_rows(config: ModuleType | None = None) -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) per option, in `VALID_KEYS` order; every key must be documented."""
    config = config or load_config_module()
    docs = config.OPTION_DOCS
    missing = [key for key in config.VALID_KEYS if key not in docs]
    extra = [key for key in docs if key not in config.VALID_KEYS]
    if missing or extra:
        raise ValueError(f"toolkit/vllm/config.py: OPTION_DOCS missing {missing}, not valid keys {extra}")
    # The dataclass's defaults, not parse_config({}): validating fault_injection imports toolkit.copy, hence torch.
    # tests/docs checks that parse_config({}) returns these same values.
    defaults = {f.name: f.default for f in dataclasses.fields(config.ConnectorConfig)}
    rows = []
    for key in config.VALID_KEYS:
        entry = docs[key]
        if "default" in entry:
            default = entry["default"]
        elif key in _DEFAULT_CONSTANT_OF_KEY:
            default = format_default(getattr(config, _DEFAULT_CONSTANT_OF_KEY[key]))
        elif defaults.get(key, dataclasses.MISSING) is not dataclasses.MISSING:
            default = format_default(defaults[key])
        else:
            raise ValueError(f"toolkit/vllm/config.py: OPTION_DOCS[{key!r}] needs a 'default' (no field default)")
        rows.append((f"`{key}`", entry["type"], default, entry["meaning"]))
    return rows


def render_table(config: ModuleType | None = None) -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in option_rows(config)]
    return "\n".join(lines) + "\n"


def splice(text: str, table: str, *, where: str = "docs/connector.md") -> str:
    """`text` with the part between the markers replaced by `table`; both markers must be there, once each."""
    if text.count(BEGIN_MARKER) != 1 or text.count(END_MARKER) != 1:
        raise BadInput(f"{where}: needs the markers {BEGIN_MARKER!r} and {END_MARKER!r} once each")
    head, rest = text.split(BEGIN_MARKER)
    _, tail = rest.split(END_MARKER)
    return f"{head}{BEGIN_MARKER}\n{table}{END_MARKER}{tail}"


def update(doc: Path = DEFAULT_DOC, *, check: bool = False) -> bool:
    """Generate the table into `doc`; with `check`, only compare. True when `doc` already held this table."""
    text = doc.read_text(encoding="utf-8")
    wanted = splice(text, render_table(), where=str(doc))
    if wanted == text:
        return True
    if not check:
        doc.write_text(wanted, encoding="utf-8")
    return False
