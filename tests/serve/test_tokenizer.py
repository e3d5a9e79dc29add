"""The tiny models' word-level tokenizer: vocabulary = the model's ids, decode/encode round trip (transformers)."""

from __future__ import annotations

import pytest

from toolkit.models import load_entry
from toolkit.models.tokenizer import has_tokenizer, vocabulary, write_tokenizer


def test_vocabulary_is_the_models():
    config = load_entry("tiny-qwen3-next").config
    vocab = vocabulary(config)
    assert sorted(vocab.values()) == list(range(config["vocab_size"]))
    assert vocab["<unk>"] == 0 and vocab["<s>"] == config["bos_token_id"] and vocab["</s>"] == config["eos_token_id"]


def test_round_trip_with_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = load_entry("tiny-qwen3-next").config
    write_tokenizer(config, tmp_path)
    assert has_tokenizer(tmp_path)
    assert {p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {0o600}
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert len(tok) == config["vocab_size"]
    ids = [5, 17, 1, 2, config["vocab_size"] - 1, 0, 3]
    text = tok.decode(ids)
    assert text == "w5 w17 <s> </s> w2047 <unk> w3"
    assert tok(text)["input_ids"] == ids
    assert tok.eos_token_id == config["eos_token_id"]
