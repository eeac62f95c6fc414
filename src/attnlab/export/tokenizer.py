"""Any attnlab tokenizer as a Hugging Face ``tokenizer.json`` with the same ids.

Byte-level BPE and word vocabularies already are ``tokenizers`` objects; characters and
synthetic symbols become a ``WordLevel`` model over the same vocabulary (ids 0–5 attnlab's
special tokens); a foreign file whose ids attnlab moved up by 6 gets those ids written in.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from attnlab.special_tokens import NUM_SPECIAL, SPECIAL_TOKENS, UNK

# what transformers' PreTrainedTokenizerFast needs to know besides tokenizer.json
SPECIAL_ROLES = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>",
                 "sep_token": "<sep>", "mask_token": "<mask>", "unk_token": "<unk>"}  # fmt: skip


def _word_level(tokens: list[str]) -> Tokenizer:
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *tokens])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS[UNK]))
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def char_tokenizer(chars: list[str]) -> Tokenizer:
    """One token per character, newlines included; unseen characters → ``<unk>``."""
    tokenizer = _word_level(chars)
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # characters join without spaces
    return tokenizer


def symbol_tokenizer(symbols: list[str]) -> Tokenizer:
    """Space-separated symbols (the synthetic tasks)."""
    tokenizer = _word_level(symbols)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def offset_tokenizer(text: str, offset: int) -> Tokenizer:
    """A foreign ``tokenizer.json`` with every id moved up by ``offset`` and attnlab's special
    tokens at 0–5, as :class:`~attnlab.data.tokenizers.OffsetTokenizer` reads it."""
    obj = json.loads(text)
    model = obj["model"]
    if not isinstance(model.get("vocab"), dict):
        raise ValueError(f"a {model.get('type')} model's vocabulary cannot be moved up")
    model["vocab"] = {token: i + offset for token, i in model["vocab"].items()}
    for i, token in enumerate(SPECIAL_TOKENS):
        model["vocab"].setdefault(token, i)
    for added in obj.get("added_tokens") or []:
        added["id"] += offset
    obj["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, t in enumerate(SPECIAL_TOKENS)
    ] + (obj.get("added_tokens") or [])  # fmt: skip
    obj["post_processor"] = None  # any template's ids were the file's own
    return Tokenizer.from_str(json.dumps(obj))


def hf_tokenizer(tokenizer: Any) -> Tokenizer:
    """The ``tokenizers.Tokenizer`` that encodes as ``tokenizer`` does (no specials added)."""
    kind = getattr(tokenizer, "kind", None)
    if kind == "char":
        return char_tokenizer(tokenizer.chars)
    if kind == "offset":
        return offset_tokenizer(tokenizer.hf.to_str(), NUM_SPECIAL)
    if hasattr(tokenizer, "hf"):
        return Tokenizer.from_str(tokenizer.hf.to_str())
    if hasattr(tokenizer, "symbols"):
        return symbol_tokenizer(tokenizer.symbols)
    raise ValueError(f"no Hugging Face form for a {type(tokenizer).__name__}")


def tokenizer_config(max_len: int) -> dict[str, Any]:
    """``tokenizer_config.json``: the fast tokenizer class and attnlab's special tokens."""
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
            "clean_up_tokenization_spaces": False, **SPECIAL_ROLES}  # fmt: skip
