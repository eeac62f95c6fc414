"""Byte-level BPE through tiktoken: the same ids as tokenizers, or tokenizers kept."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnlab.data import tiktoken_bpe
from attnlab.data.encoding import encoder_for
from attnlab.data.tokenizers import BPETokenizer, OffsetTokenizer, tokenizer_from_json
from attnlab.special_tokens import NUM_SPECIAL

TRAINING = [
    "The quick brown fox jumps over the lazy dog. It's the dog's day; they'll see, we've won.",
    "Ünïcödé naïve café — déjà vu, Straße, ÆØÅ; Ελληνικά κείμενα; русский текст; 日本語の文章",
    "def f(x):\n    return x ** 2  # squares\n\n\tindented\ttabs\r\nwindows lines\r\n",
    "numbers 1234567 3.14159 2024-06-01 0x1F600 and emoji 🎉🚀👍🏽 with ZWJ 👨‍👩‍👧",
] * 30
VARIED = [
    "", " ", "   ", "\n", "\n\n\n", " \n \n", "\t \t", "a  b   c    d", "trailing   ", "   leading",
    "It's DON'T they'LL we've I'M", "'s's's 'll'll", "x" * 3000, "ab" * 777 + " " * 40,
    "mixed\u00a0nbsp\u2003em\u3000ideographic spaces", "\r\n\r\n  \r\n", "日本語のテキスト、です。",
    "👨‍👩‍👧‍👦 🏳️‍🌈 e\u0301 (combining) \ufeffbom", "<eos> a <pad>b<unk> c<eos><eos>",
    "<|endoftext|>between<|endoftext|> <|endoftext|>", "12345678901234567890 3.5e-10 ١٢٣",
    "\x00\x01\x7f control \u200b zero width", "tokens: café CAFÉ Café café.", "\\u00e9 \\n",
    *TRAINING[:4],
]  # fmt: skip


def trained(special: str | None, vocab_size: int = 600) -> Tokenizer:
    """A byte-level BPE as GPT-2's (no attnlab specials, ``special`` added) or attnlab's."""
    if special is None:
        return BPETokenizer.train(TRAINING, vocab_size).hf
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(TRAINING, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[special], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    return tokenizer


@pytest.mark.parametrize("special", [None, "<|endoftext|>"], ids=["attnlab's", "foreign"])
def test_tiktoken_gives_the_ids_of_tokenizers_on_varied_text(special: str | None) -> None:
    tokenizer = tokenizer_from_json(trained(special).to_str(), foreign=True)
    assert isinstance(tokenizer, OffsetTokenizer) == (special is not None)  # the +6 offset
    encoder, how = encoder_for(tokenizer)
    assert how == "tiktoken"
    for text in VARIED:
        assert encoder.encode_array(text).tolist() == tokenizer.encode(text), text


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k_base", "o200k_base"])
def test_a_tiktoken_vocabulary_as_a_tokenizer_file_gives_the_same_ids(pattern: str) -> None:
    expressions = {"gpt2": tiktoken_bpe.GPT2_PATTERN,
                   **{name: p for name, p, _ in tiktoken_bpe.KNOWN_FILES.values()}}  # fmt: skip
    ranks = tiktoken_bpe.from_hf_json(trained("<|endoftext|>").to_str())[0].ranks
    specials = {"<|endoftext|>": max(ranks.values()) + 1}
    bpe = tiktoken_bpe.ByteBPE("test", expressions[pattern], ranks, specials)
    hf = tiktoken_bpe.to_hf(bpe)
    for text in VARIED:
        assert bpe.encode_array(text).tolist() == hf.encode(text).ids, text
    back = tiktoken_bpe.from_hf_json(hf.to_str())[0]  # and back
    assert (back.ranks, back.pattern, back.specials) == (ranks, bpe.pattern, specials)


def test_a_bpe_whose_merges_tiktoken_would_not_make_keeps_tokenizers() -> None:
    # "abc" is made of "ab" + "c", but "bc" ranks before "ab": tokenizers stops at [a, bc],
    # tiktoken would join those two as well
    symbols = [tiktoken_bpe.byte_symbols()[b] for b in range(256)]
    vocab = {s: i for i, s in enumerate(symbols)} | {"bc": 256, "ab": 257, "abc": 258}
    hf = Tokenizer(models.BPE(vocab, [("b", "c"), ("a", "b"), ("ab", "c")]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe, why = tiktoken_bpe.from_hf_json(hf.to_str())
    assert bpe is None and "'ab' + 'c'" in why
    assert hf.encode("abc").ids == [97, 256]  # what the kept tokenizers path gives


def test_a_normalizing_tokenizer_keeps_tokenizers() -> None:
    hf = trained(None)
    hf.normalizer = normalizers.Lowercase()
    encoder, how = encoder_for(BPETokenizer(hf))
    assert encoder is not None and how.startswith("tokenizers (not through tiktoken")


def test_a_tiktoken_file_is_known_by_its_hash_and_an_unknown_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    ranks = tiktoken_bpe.from_hf_json(trained("<|endoftext|>").to_str())[0].ranks
    path = tmp_path / "mine.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))
    with pytest.raises(tiktoken_bpe.DataError, match="not one of the .tiktoken files"):
        tiktoken_bpe.read_tiktoken_file(path, NUM_SPECIAL)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    known = ("mine", tiktoken_bpe.GPT2_PATTERN, {"<|endoftext|>": max(ranks.values()) + 1})
    monkeypatch.setitem(tiktoken_bpe.KNOWN_FILES, digest, known)
    bpe = tiktoken_bpe.read_tiktoken_file(path, NUM_SPECIAL)
    assert bpe.ranks == ranks and bpe.encode_array("the dog")[0] >= NUM_SPECIAL


def test_a_vocabulary_with_gaps_in_its_ids_counts_up_to_its_largest(tmp_path: Path) -> None:
    ranks = tiktoken_bpe.from_hf_json(trained("<|endoftext|>").to_str())[0].ranks
    top = max(ranks.values())
    specials = {"<|endoftext|>": top + 1, "<|endofprompt|>": top + 20}  # as cl100k_base's
    hf = tiktoken_bpe.to_hf(tiktoken_bpe.ByteBPE("gaps", tiktoken_bpe.GPT2_PATTERN, ranks,
                                                 specials))  # fmt: skip
    tokenizer = OffsetTokenizer(hf)
    assert tokenizer.vocab_size == top + 20 + 1 + NUM_SPECIAL
    assert tokenizer.encode("<|endofprompt|>") == [top + 20 + NUM_SPECIAL]
