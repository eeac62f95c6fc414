"""The special token ids every attnlab vocabulary reserves (ids 0–5), with no dependencies.

Synthetic, character and BPE vocabularies all keep these ids, so tasks, models and
generation never ask a tokenizer for them; :mod:`attnlab.data.base` re-exports them.
"""

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<sep>", "<mask>", "<unk>")
PAD, BOS, EOS, SEP, MASK, UNK = range(len(SPECIAL_TOKENS))
NUM_SPECIAL = len(SPECIAL_TOKENS)
