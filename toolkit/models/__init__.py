"""Tiny models with seeded random weights, generated once on this machine (never committed).

Each model is a committed JSON file in `data/models/tiny/`: ``{"name", "description", "seed", "default",
"config"}`` where ``config`` is a Hugging Face ``config.json``. `ensure_model(name)` builds the weights with
transformers (``torch.manual_seed(seed)`` then ``from_config``), saves them with ``save_pretrained`` into
``.cache/models/<name>-<config hash>/`` (directories 0700, files 0600) and returns that path. A second call finds
the folder and returns at once. This package does not import vllm.
"""

from toolkit.models.registry import ModelEntry, cache_root, ensure_model, list_models, load_entry, model_dir

__all__ = ["ModelEntry", "cache_root", "ensure_model", "list_models", "load_entry", "model_dir"]
