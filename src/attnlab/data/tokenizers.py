"""Tokenizers for real data: characters, byte-level BPE and whole words.

Every vocabulary starts with ``SPECIAL_TOKENS`` at ids 0–5. BPE and word
vocabularies are trained with Hugging Face ``tokenizers`` on the training split
only; a tokenizer is saved as one JSON file (``tokenizer.json`` in the run
directory) and :func:`load_tokenizer` restores either kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizerModel
from tokenizers import decoders, models, pre_tokenizers, trainers

from attnlab.errors import ConfigError, DataError
from attnlab.special_tokens import NUM_SPECIAL, SPECIAL_TOKENS, UNK

TOKENIZER_KINDS = ("char", "bpe", "word")
_CHAR_FORMAT = "attnlab-char"  # marks our own JSON; anything else is a HF tokenizer file
_OFFSET_FORMAT = "attnlab-offset"  # a foreign tokenizer.json with its ids moved up


def _write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class CharTokenizer:
    """One id per character of the training text (sorted), from id 6; unseen → ``<unk>``."""

    kind = "char"

    def __init__(self, chars: Sequence[str]) -> None:
        self.chars = list(chars)
        self._ids = {c: i + NUM_SPECIAL for i, c in enumerate(self.chars)}
        self.vocab_size = NUM_SPECIAL + len(self.chars)

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        """The sorted set of characters in ``texts``."""
        alphabet: set[str] = set()
        for text in texts:
            alphabet.update(text)
        return cls(sorted(alphabet))

    def encode(self, text: str) -> list[int]:
        """Text to ids; characters outside the vocabulary become ``UNK``."""
        get = self._ids.get
        return [get(c, UNK) for c in text]

    def encode_array(self, text: str) -> np.ndarray:
        """``encode`` as an int64 array, by a vectorised look-up of code points (fast)."""
        if not hasattr(self, "_points"):
            points = np.array([ord(c) for c in self.chars], dtype=np.int64)
            order = np.argsort(points)
            self._points, self._point_ids = points[order], order + NUM_SPECIAL
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        if not len(self._points):
            return np.full(len(codes), UNK, dtype=np.int64)
        at = np.searchsorted(self._points, codes).clip(0, len(self._points) - 1)
        return np.where(self._points[at] == codes, self._point_ids[at], UNK)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text; special tokens carry no text and are dropped."""
        n = len(self.chars)
        return "".join(self.chars[i - NUM_SPECIAL] for i in ids if 0 <= i - NUM_SPECIAL < n)

    def to_json(self) -> str:
        """The tokenizer as a JSON string."""
        return json.dumps({"format": _CHAR_FORMAT, "chars": self.chars}, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        """Write the JSON to ``path`` (atomically)."""
        _write_atomic(path, self.to_json())


class HFTokenizer:
    """A trained Hugging Face ``tokenizers.Tokenizer`` behind the attnlab ``Tokenizer`` protocol."""

    kind = "hf"

    def __init__(self, tokenizer: HFTokenizerModel) -> None:
        for i, token in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(token) != i:
                raise DataError(
                    f"tokenizer: special token {token!r} must have id {i}; "
                    "train it with special_tokens=list(SPECIAL_TOKENS)"
                )
        self.hf = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Text to ids, no special tokens added."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts, in parallel (Rust)."""
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to detokenized text, special tokens dropped."""
        return self.hf.decode(list(ids), skip_special_tokens=True)

    def to_json(self) -> str:
        """The tokenizer in Hugging Face's ``tokenizer.json`` format."""
        return self.hf.to_str()

    def save(self, path: str | Path) -> None:
        """Write the JSON to ``path`` (atomically); loadable by ``tokenizers`` too."""
        _write_atomic(path, self.to_json())


class BPETokenizer(HFTokenizer):
    """Byte-level BPE (Sennrich et al., 2016; GPT-2's byte variant): lossless, never ``<unk>``.

    The ByteLevel pre-tokenizer/decoder pair maps every byte to a printable
    symbol and back, so ``decode(encode(s)) == s`` for any text, spaces and
    newlines included.
    """

    kind = "bpe"

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        """Learn merges on ``texts`` up to ``vocab_size`` (at least the 256 bytes + specials)."""
        tok = HFTokenizerModel(models.BPE(unk_token=SPECIAL_TOKENS[UNK]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)


class WordTokenizer(HFTokenizer):
    """Whitespace-separated words, the ``vocab_size`` most frequent kept; the rest → ``<unk>``."""

    kind = "word"

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> WordTokenizer:
        """Count words in ``texts`` and keep the most frequent."""
        tok = HFTokenizerModel(models.WordLevel(unk_token=SPECIAL_TOKENS[UNK]))
        # Metaspace marks word starts with "▁" so decoding restores single spaces.
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)


class OffsetTokenizer:
    """A ``tokenizer.json`` made elsewhere (GPT-2's, say) that lacks attnlab's special tokens:
    its ids are moved up by ``NUM_SPECIAL``, so ids 0–5 stay attnlab's specials and every
    task, mask and decoder works unchanged. Id ``i`` of the file is attnlab's ``i + 6``
    (GPT-2's 50 257 tokens become a vocabulary of 50 263)."""

    kind = "offset"

    def __init__(self, tokenizer: HFTokenizerModel) -> None:
        self.hf = tokenizer
        # up to the largest id: cl100k_base's special tokens, for one, leave gaps
        self.vocab_size = NUM_SPECIAL + max(tokenizer.get_vocab().values(), default=-1) + 1

    def encode(self, text: str) -> list[int]:
        """Text to attnlab ids (the file's ids + 6), no special tokens added."""
        return [i + NUM_SPECIAL for i in self.hf.encode(text, add_special_tokens=False).ids]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts, in parallel (Rust)."""
        batch = self.hf.encode_batch(list(texts), add_special_tokens=False)
        return [[i + NUM_SPECIAL for i in e.ids] for e in batch]

    def decode(self, ids: Sequence[int]) -> str:
        """Attnlab ids to text; attnlab's special tokens are dropped."""
        return self.hf.decode([i - NUM_SPECIAL for i in ids if i >= NUM_SPECIAL])

    def to_json(self) -> str:
        """The file's JSON wrapped with the offset, so a run directory restores it."""
        return json.dumps({"format": _OFFSET_FORMAT, "offset": NUM_SPECIAL,
                           "tokenizer": self.hf.to_str()})  # fmt: skip

    def save(self, path: str | Path) -> None:
        """Write the JSON to ``path`` (atomically)."""
        _write_atomic(path, self.to_json())


AnyTokenizer = CharTokenizer | HFTokenizer | OffsetTokenizer


def train_tokenizer(kind: str, texts: Sequence[str], vocab_size: int | None) -> AnyTokenizer:
    """Train a ``char``, ``bpe`` or ``word`` tokenizer on ``texts`` (the training split)."""
    if kind == "char":
        return CharTokenizer.train(texts)
    if kind not in TOKENIZER_KINDS:
        raise ConfigError(f"data.tokenizer: unknown {kind!r}; choose one of {TOKENIZER_KINDS}")
    if not vocab_size or vocab_size <= NUM_SPECIAL:
        raise ConfigError(
            f"data.vocab_size: {kind} needs a vocab_size > {NUM_SPECIAL}, got {vocab_size}"
        )
    cls = BPETokenizer if kind == "bpe" else WordTokenizer
    return cls.train(texts, vocab_size)


def tokenizer_from_json(text: str, foreign: bool = False) -> AnyTokenizer:
    """Restore a tokenizer from the JSON written by ``save``/``to_json``. ``foreign``: a
    Hugging Face file without attnlab's special tokens becomes an :class:`OffsetTokenizer`
    (otherwise it is refused)."""
    obj = json.loads(text)
    if obj.get("format") == _CHAR_FORMAT:
        return CharTokenizer(obj["chars"])
    if obj.get("format") == _OFFSET_FORMAT:
        return OffsetTokenizer(HFTokenizerModel.from_str(obj["tokenizer"]))
    if obj.get("kind") == "symbols":  # a synthetic task's symbol names
        from attnlab.data.synthetic import SymbolTokenizer

        return SymbolTokenizer(obj["symbols"])  # type: ignore[return-value]
    hf = HFTokenizerModel.from_str(text)
    own = all(hf.token_to_id(token) == i for i, token in enumerate(SPECIAL_TOKENS))
    if foreign and not own:
        return OffsetTokenizer(hf)
    model_type = obj.get("model", {}).get("type")
    cls = {"BPE": BPETokenizer, "WordLevel": WordTokenizer}.get(model_type, HFTokenizer)
    return cls(hf)


def load_tokenizer(path: str | Path, foreign: bool = False) -> AnyTokenizer:
    """Load a tokenizer saved by a data module (``<run_dir>/tokenizer.json``); ``foreign``:
    any Hugging Face ``tokenizer.json`` (see :func:`tokenizer_from_json`)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"tokenizer: no file {path}; pass the run directory that holds tokenizer.json"
        )
    try:
        return tokenizer_from_json(path.read_text(encoding="utf-8"), foreign)
    except DataError:
        raise
    except Exception as e:  # json, KeyError, or tokenizers' plain Exception
        reason = str(e).splitlines()[0] if str(e) else ""
        raise DataError(
            f"tokenizer: {path} is not a tokenizer file ({type(e).__name__}: {reason})"
        ) from e
