"""A word-level tokenizer over a tiny model's vocabulary, written beside its weights.

The tiny models have random weights, so no real tokenizer fits them; vLLM's own clients (`vllm bench serve`, the
OpenAI server's text prompts and detokenized outputs) still need one. Token id `i` is the word `w<i>` (ids 0-2 are
`<unk>`, the model's BOS and EOS where the config names them), words are split on whitespace and decoded joined by
single spaces, so `encode(decode(ids)) == ids` for every id list and the vocabulary is exactly the model's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
UNK_TOKEN = "<unk>"


def vocabulary(config: dict) -> dict[str, int]:
    """word -> id for every id below the model's `vocab_size`."""
    size = int(config["vocab_size"])
    if size < 3:
        raise ValueError(f"vocab_size: a tokenizer needs at least 3 ids, got {size}")
    special = {0: UNK_TOKEN}
    if config.get("bos_token_id") is not None:
        special.setdefault(int(config["bos_token_id"]), "<s>")
    if config.get("eos_token_id") is not None:
        special.setdefault(int(config["eos_token_id"]), "</s>")
    return {special.get(i, f"w{i}"): i for i in range(size)}


def has_tokenizer(path: Path) -> bool:
    return all((path / name).is_file() for name in TOKENIZER_FILES)


def write_tokenizer(config: dict, out: Path) -> None:
    """Write the tokenizer files into `out` (each file atomically, mode 0600; tokenizer_config.json last)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = vocabulary(config)
    by_id = {i: word for word, i in vocab.items()}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with one space
    special = {"unk_token": UNK_TOKEN}
    if config.get("bos_token_id") is not None:
        special["bos_token"] = by_id[int(config["bos_token_id"])]
    if config.get("eos_token_id") is not None:
        special["eos_token"] = by_id[int(config["eos_token_id"])]
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(config.get("max_position_embeddings", 8192)),
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        **special,
    }
    _write(out / "tokenizer.json", tokenizer.to_str())
    _write(out / "special_tokens_map.json", json.dumps(special, indent=2) + "\n")
    _write(out / "tokenizer_config.json", json.dumps(tokenizer_config, indent=2) + "\n")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
