"""Tokenizers: specials at ids 0–5, lossless round trips, save/load of either kind."""

from __future__ import annotations

import pytest

from attnlab.data.base import NUM_SPECIAL, SPECIAL_TOKENS, UNK
from attnlab.data.tokenizers import (
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    load_tokenizer,
    train_tokenizer,
)
from attnlab.errors import ConfigError, DataError

CORPUS = [
    "The quick brown fox jumps over the lazy dog.\n",
    "Zwei junge Männer spielen im Schnee.\n",
    "  indented line\twith a tab, and   several spaces\n",
] * 20


def test_char_tokenizer_round_trips_text() -> None:
    tok = CharTokenizer.train(CORPUS)
    text = "The lazy Männer\n  jump."
    assert tok.decode(tok.encode(text)) == text


def test_char_ids_follow_the_specials_in_sorted_order() -> None:
    tok = CharTokenizer.train(["cab"])
    assert tok.encode("abc") == [NUM_SPECIAL, NUM_SPECIAL + 1, NUM_SPECIAL + 2]
    assert tok.vocab_size == NUM_SPECIAL + 3


def test_char_unknown_character_becomes_unk() -> None:
    tok = CharTokenizer.train(["abc"])
    assert tok.encode("a?") == [NUM_SPECIAL, UNK]


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox.",
        "  two  spaces\nand a newline\n",
        "Männer im Schnee",
        "日本語 ünseen ✓",
    ],
)
def test_bpe_round_trips_any_text(text: str) -> None:
    tok = BPETokenizer.train(CORPUS, vocab_size=400)
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("kind", ["bpe", "word"])
def test_trained_special_tokens_have_ids_0_to_5(kind: str) -> None:
    tok = train_tokenizer(kind, CORPUS, vocab_size=300)
    assert [tok.hf.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(NUM_SPECIAL))


def test_bpe_respects_vocab_size_and_compresses_text() -> None:
    tok = BPETokenizer.train(CORPUS, vocab_size=320)
    assert tok.vocab_size <= 320
    assert len(tok.encode(CORPUS[0])) < len(CORPUS[0])


def test_word_tokenizer_round_trips_single_spaced_words() -> None:
    tok = WordTokenizer.train(["a good film .", "a bad film ."], vocab_size=50)
    assert tok.decode(tok.encode("a bad film .")) == "a bad film ."
    assert tok.encode("a great film")[1] == UNK


@pytest.mark.parametrize("kind", ["char", "bpe", "word"])
def test_load_tokenizer_restores_the_saved_kind(kind: str, tmp_path) -> None:
    tok = train_tokenizer(kind, CORPUS, vocab_size=300)
    tok.save(tmp_path / "tokenizer.json")
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    assert type(loaded) is type(tok)
    assert loaded.vocab_size == tok.vocab_size
    assert loaded.encode(CORPUS[1]) == tok.encode(CORPUS[1])


def test_load_tokenizer_missing_file_raises_data_error(tmp_path) -> None:
    with pytest.raises(DataError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_load_tokenizer_rejects_a_foreign_file(tmp_path) -> None:
    (tmp_path / "tokenizer.json").write_text("not json")
    with pytest.raises(DataError, match="not a tokenizer file"):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_unknown_tokenizer_kind_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="data.tokenizer"):
        train_tokenizer("sentencepiece", CORPUS, vocab_size=100)


def test_bpe_without_vocab_size_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="data.vocab_size"):
        train_tokenizer("bpe", CORPUS, vocab_size=None)
