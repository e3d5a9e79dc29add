"""Model entries (committed JSON) and their generated weight folders (local cache)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolkit import locations
from toolkit.errors import BadInput
from toolkit.models.tokenizer import has_tokenizer, write_tokenizer
from toolkit.private_fs import make_private_dir

MODELS_DATA_DIR = locations.data_dir() / "models" / "tiny"
# Bump when the way weights are generated changes: it is part of the folder hash.
GENERATOR_VERSION = 1
_DONE_MARKER = ".complete"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    seed: int
    default: bool
    config: dict
    source: Path

    @property
    def config_hash(self) -> str:
        text = json.dumps({"config": self.config, "seed": self.seed, "generator": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def architecture(self) -> str:
        return (self.config.get("architectures") or ["?"])[0]


def cache_root() -> Path:
    """Where generated weights live: ``$KVTK_MODEL_CACHE``, else ``<checkout>/.cache/models`` in a source checkout,
    else the user cache's ``models/`` (``$KVTK_CACHE_DIR`` or ``~/.cache/kvtk``)."""
    override = os.environ.get("KVTK_MODEL_CACHE")
    if override:
        return Path(override)
    checkout = locations.source_checkout()
    return checkout / ".cache" / "models" if checkout else locations.user_cache_dir() / "models"


def list_models() -> list[ModelEntry]:
    return [load_entry(path.stem) for path in sorted(MODELS_DATA_DIR.glob("*.json"))]


def load_entry(name: str) -> ModelEntry:
    path = MODELS_DATA_DIR / f"{name}.json"
    if not path.is_file():
        valid = ", ".join(p.stem for p in sorted(MODELS_DATA_DIR.glob("*.json")))
        raise BadInput(f"model: unknown model {name!r}; valid models: {valid}")
    raw = json.loads(path.read_text())
    missing = [key for key in ("seed", "config") if key not in raw]
    if missing:
        raise BadInput(f"model: {path} lacks the key(s) {missing}")
    return ModelEntry(
        name=raw.get("name", name),
        description=raw.get("description", ""),
        seed=int(raw["seed"]),
        default=bool(raw.get("default", False)),
        config=dict(raw["config"]),
        source=path,
    )


def model_dir(name: str) -> Path:
    """The folder `ensure_model(name)` fills (it may not exist yet)."""
    entry = load_entry(name)
    return cache_root() / f"{entry.name}-{entry.config_hash}"


def is_ready(path: Path) -> bool:
    return (path / _DONE_MARKER).is_file()


def ensure_model(name: str, *, quiet: bool = True) -> Path:
    """Return the weight folder of `name`, generating the seeded weights once if they are missing."""
    entry = load_entry(name)
    target = model_dir(name)
    if is_ready(target):
        if not has_tokenizer(target):  # a folder generated before the models had tokenizers
            write_tokenizer(entry.config, target)
        return target
    root = cache_root()
    _make_private_dir(root.parent if root.parent.name == ".cache" else root)
    _make_private_dir(root)
    if not quiet:
        print(f"models: generating {entry.name} ({entry.architecture}) into {target}")
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=root))
    try:
        _generate(entry, work)
        for path in work.rglob("*"):
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
        (work / _DONE_MARKER).write_text(entry.config_hash + "\n")
        os.chmod(work / _DONE_MARKER, 0o600)
        os.chmod(work, 0o700)
        if target.exists():  # a half-written folder from an interrupted run
            shutil.rmtree(target)
        os.replace(work, target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def _make_private_dir(path: Path) -> None:
    make_private_dir(path)
    os.chmod(path, 0o700)  # the weights folder is owner-only even when it already existed


def _generate(entry: ModelEntry, out: Path) -> None:
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(**entry.config)
    torch.manual_seed(entry.seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained rewrites config.json; keep what the engine must see exactly as committed.
    saved = json.loads((out / "config.json").read_text())
    for key in ("tie_word_embeddings", "max_position_embeddings", "architectures"):
        if key in entry.config:
            saved[key] = entry.config[key]
    saved["torch_dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    write_tokenizer(entry.config, out)
