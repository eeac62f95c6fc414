"""Every BLEU comes with its sacreBLEU signature (Post 2018): the score attnlab logs
(torchmetrics' SacreBLEUScore) is sacreBLEU's corpus BLEU with the options the signature
names, and the signature travels from summary.json to attnlab-compare's table."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU
from torchmetrics.text import SacreBLEUScore

from attnlab.callbacks.summary import write_summary
from attnlab.compare import cli as compare_cli
from attnlab.tasks.seq2seq import BLEU_OPTIONS, bleu_signature

WORDS = "the a cat dog sat on mat , . is was red blue big small ran".split()


def corpus(seed: int, keep: float) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    refs = [" ".join(rng.choices(WORDS, k=rng.randint(3, 14))) for _ in range(40)]
    hyps = [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split())
            for r in refs]  # fmt: skip
    return hyps, refs


@pytest.mark.parametrize(("seed", "keep"), [(0, 0.9), (1, 0.6), (2, 0.3), (3, 0.0)])
def test_the_logged_bleu_is_sacrebleu_with_the_signed_options(seed: int, keep: float) -> None:
    hyps, refs = corpus(seed, keep)
    ours = SacreBLEUScore(tokenize="13a", lowercase=False)  # as Seq2SeqTask builds it
    ours.update(hyps, [[r] for r in refs])
    sacre = BLEU(**BLEU_OPTIONS).corpus_score(hyps, [refs]).score
    assert 100 * float(ours.compute()) == pytest.approx(sacre, abs=1e-4)


def test_the_signature_names_the_options() -> None:
    signature = bleu_signature()
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:none|version:")


def test_compare_prints_the_signature_of_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for seed in (0, 1):
        write_summary(tmp_path / f"run{seed}", status="completed", task="seq2seq",
                      overrides=[f"seed={seed}"], metrics={"val/bleu": 20.0 + seed},
                      bleu_signature=bleu_signature())  # fmt: skip
    assert compare_cli.main([str(tmp_path), "--metric", "val/bleu"]) == 0
    assert f"BLEU: sacreBLEU {bleu_signature()}" in capsys.readouterr().out
