"""Byte-level BPE through tiktoken: the ids of ``tokenizers``, several times faster.

GPT-2's BPE (Radford et al., 2019) splits text with a regular expression, writes each
piece as UTF-8 bytes and merges adjacent symbols until no merge applies. ``tokenizers``
applies the lowest-ranked pair of its merge list; tiktoken merges the adjacent pair whose
concatenation is the lowest-ranked token. The two agree when every token's rank orders
it as its merge does and tiktoken's loop, run on a token's own bytes below its rank,
arrives at exactly the pair that ``tokenizers`` merges (then no other way of joining two
tokens into a third is ever the cheapest): :func:`from_hf_json` checks that, token by
token, and answers None (with the reason) for a tokenizer that is not expressible, which
then keeps ``tokenizers``.

The OpenAI encodings (``r50k_base``, GPT-2's; ``p50k_base``, ``cl100k_base``,
``o200k_base``) come as ``.tiktoken`` files of ranks alone; :func:`read_tiktoken_file`
knows them by their SHA-256 (the hashes tiktoken itself checks), and :func:`to_hf`
writes the same vocabulary as a ``tokenizers`` file, so a run directory decodes it.
Nothing is downloaded.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import DataError

# tokenizers' ByteLevel pre-tokenizer (GPT-2's own expression)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
                   r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")  # fmt: skip
# the same without possessive quantifiers (tiktoken's first form), for tokenizers' Oniguruma,
# where "{1,3}+" repeats the group instead
_CL100K_PLAIN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")  # fmt: skip
_FOR_TOKENIZERS = {_CL100K_PATTERN: _CL100K_PLAIN}
_FOR_TIKTOKEN = {plain: fast for fast, plain in _FOR_TOKENIZERS.items()}
_O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""",
    r"""\s+""",
])  # fmt: skip
_EOT, _FIM = "<|endoftext|>", ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")
# the OpenAI encodings by their file's SHA-256 (as tiktoken_ext.openai_public defines them)
KNOWN_FILES: dict[str, tuple[str, str, dict[str, int]]] = {
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930":
        ("r50k_base", GPT2_PATTERN, {_EOT: 50256}),
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069":
        ("p50k_base", GPT2_PATTERN, {_EOT: 50256}),
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7":
        ("cl100k_base", _CL100K_PATTERN, {_EOT: 100257, _FIM[0]: 100258, _FIM[1]: 100259,
                                          _FIM[2]: 100260, "<|endofprompt|>": 100276}),
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d":
        ("o200k_base", _O200K_PATTERN, {_EOT: 199999, "<|endofprompt|>": 200018}),
}  # fmt: skip


def byte_symbols() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (``bytes_to_unicode``): printable Latin-1
    characters stand for themselves, the rest move up past 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    symbols, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(symbols.items()))


def merge_parts(token: bytes, ranks: dict[bytes, int], below: int) -> list[bytes]:
    """tiktoken's merge loop on ``token``'s bytes, with tokens ranked below ``below`` only."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, at = below, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1], below)
            if rank < best:
                best, at = rank, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts


@dataclass
class ByteBPE:
    """A byte-level BPE as tiktoken reads it: the split expression, each token's bytes and
    rank (its id in the file), the special tokens, and ``offset``, added to every id."""

    name: str
    pattern: str
    ranks: dict[bytes, int]
    specials: dict[str, int]
    offset: int = 0
    _encoding: Any = field(default=None, repr=False, compare=False)

    @property
    def encoding(self) -> Any:
        if self._encoding is None:
            import tiktoken

            self._encoding = tiktoken.Encoding(self.name, pat_str=self.pattern,
                                               mergeable_ranks=self.ranks,
                                               special_tokens=self.specials)  # fmt: skip
        return self._encoding

    def __getstate__(self) -> dict[str, Any]:  # a worker process builds its own Encoding
        return {**self.__dict__, "_encoding": None}

    def encode_array(self, text: str) -> np.ndarray:
        """``text``'s ids (uint32), special tokens in the text included, as ``tokenizers``
        encodes them."""
        ids = self.encoding.encode_to_numpy(text, allowed_special=set(self.specials),
                                            disallowed_special=())  # fmt: skip
        return ids + np.uint32(self.offset) if self.offset else ids


def _pre_tokenizer_pattern(pre: Any) -> str | None:
    """The split expression of a byte-level pre-tokenizer, None for any other."""
    if not isinstance(pre, dict):
        return None
    plain = {"add_prefix_space": False}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return GPT2_PATTERN if pre.items() >= plain.items() else None
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return None
    split, level = steps
    if (split.get("type") == "Split" and split.get("behavior") == "Isolated"
            and not split.get("invert") and "Regex" in split.get("pattern", {})
            and level.get("type") == "ByteLevel" and not level.get("use_regex", True)
            and level.items() >= plain.items()):  # fmt: skip
        return _FOR_TIKTOKEN.get(split["pattern"]["Regex"], split["pattern"]["Regex"])
    return None


def _specials(obj: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
    specials = {}
    for added in obj.get("added_tokens") or []:
        if added.get("single_word") or added.get("lstrip") or added.get("rstrip"):
            return None, f"the added token {added['content']!r} matches words or strips spaces"
        specials[added["content"]] = int(added["id"])
    names = sorted(specials)
    if any(b.startswith(a) for a, b in itertools.pairwise(names)):
        return None, "one added token begins another"
    return specials, ""


def from_hf_json(text: str, offset: int = 0) -> tuple[ByteBPE | None, str]:
    """The tokenizer in ``text`` (a ``tokenizer.json``) as a :class:`ByteBPE` with the same
    ids, or None and why it is not one."""
    obj = json.loads(text)
    model = obj.get("model") or {}
    pattern = _pre_tokenizer_pattern(obj.get("pre_tokenizer"))
    if model.get("type") != "BPE" or pattern is None or obj.get("normalizer") is not None:
        return None, "not a byte-level BPE without a normalizer"
    if (model.get("dropout") or model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix") or model.get("byte_fallback")):  # fmt: skip
        return None, "its BPE uses dropout, word prefixes or suffixes, or byte fallback"
    specials, why = _specials(obj)
    if specials is None:
        return None, why
    to_byte = {s: b for b, s in byte_symbols().items()}
    special_ids = set(specials.values())
    ranks: dict[bytes, int] = {}
    for symbol, rank in model["vocab"].items():
        if rank in special_ids:
            continue
        if not all(c in to_byte for c in symbol):
            return None, f"its token {symbol!r} is not made of byte symbols"
        ranks[bytes(to_byte[c] for c in symbol)] = rank
    if any(bytes([b]) not in ranks for b in range(256)):
        return None, "a byte has no token of its own"
    merges = [m.split(" ") if isinstance(m, str) else m for m in model.get("merges", [])]
    if len(merges) != len(ranks) - 256:
        return None, "a token is not the result of exactly one merge"
    last = max(ranks[bytes([b])] for b in range(256))
    for a, b in merges:
        pair = [bytes(to_byte[c] for c in a), bytes(to_byte[c] for c in b)]
        rank = ranks.get(pair[0] + pair[1], -1)
        if rank <= last or merge_parts(pair[0] + pair[1], ranks, rank) != pair:
            return None, f"the merge {a!r} + {b!r} is not the one tiktoken would make"
        last = rank
    return ByteBPE(f"attnlab-{hashlib.sha256(text.encode()).hexdigest()[:12]}", pattern,
                   ranks, specials, offset), ""  # fmt: skip


def read_tiktoken_file(path: Path, offset: int) -> ByteBPE:
    """A ``.tiktoken`` file of one of the OpenAI encodings (base64 token, rank per line)."""
    data = path.read_bytes()
    known = KNOWN_FILES.get(hashlib.sha256(data).hexdigest())
    if known is None:
        names = ", ".join(name for name, _, _ in KNOWN_FILES.values())
        raise DataError(
            f"--tokenizer: {path} is not one of the .tiktoken files attnlab-prepare knows "
            f"({names}: checked by SHA-256); pass one of those or a tokenizer.json"
        )
    name, pattern, specials = known
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ByteBPE(name, pattern, ranks, specials, offset)


def to_hf(bpe: ByteBPE) -> Any:
    """The same vocabulary as a ``tokenizers.Tokenizer`` (merges found as tiktoken makes
    them), for decoding and for ``tokenizer.json``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    symbol = byte_symbols()
    text = {token: "".join(symbol[b] for b in token) for token in bpe.ranks}
    merges = []
    for token, rank in sorted(bpe.ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            parts = merge_parts(token, bpe.ranks, rank)
            if len(parts) != 2:
                raise DataError(f"--tokenizer: the {bpe.name} file is no BPE (token {token!r})")
            merges.append((text[parts[0]], text[parts[1]]))
    # the special tokens in the vocabulary too (as GPT-2's own file has them): they keep
    # their ids, holes in the numbering included
    vocab = {**{text[t]: r for t, r in bpe.ranks.items()}, **bpe.specials}
    tokenizer = Tokenizer(models.BPE(vocab, merges))
    if bpe.pattern == GPT2_PATTERN:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_FOR_TOKENIZERS.get(bpe.pattern, bpe.pattern)),
                                 behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])  # fmt: skip
    tokenizer.decoder = decoders.ByteLevel()
    for content, _ in sorted(bpe.specials.items(), key=lambda item: item[1]):
        tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False)])
    return tokenizer
