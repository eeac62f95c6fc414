"""``attnlab-eval by_length=…``: test BLEU per source-length bucket (Bahdanau et al., Fig. 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU

from attnlab import eval as attnlab_eval
from attnlab.errors import ConfigError
from attnlab.tasks.seq2seq import bleu_by_length, bleu_signature
from composed_runs import TINY_MODEL, compose_run


def test_bleu_by_length_is_corpus_bleu_within_each_bucket() -> None:
    examples = [
        (3, "the cat sat on the mat", "the cat sat on the mat"),
        (5, "a dog ran", "a dog ran in the park"),
        (12, "one two three four five", "one two three four six"),
        (30, "x y z", "x y z w"),
    ]
    out = bleu_by_length(examples, [10, 20])
    assert out["n_len_01-10"] == 2 and out["n_len_11-20"] == 1 and out["n_len_21+"] == 1
    bucket = BLEU(smooth_method="none").corpus_score([examples[0][1], examples[1][1]],
                                 [[examples[0][2], examples[1][2]]]).score  # fmt: skip
    assert out["bleu_len_01-10"] == pytest.approx(bucket)
    assert out["bleu_len_11-20"] == pytest.approx(
        BLEU(smooth_method="none").corpus_score([examples[2][1]], [[examples[2][2]]]).score
    )


@pytest.mark.parametrize("value", ["[20,10]", "[0,5]", "ten", "[]"])
def test_bad_bucket_edges_are_one_line(value: str) -> None:
    with pytest.raises(ConfigError, match="by_length"):
        attnlab_eval.length_buckets(value)


def test_eval_prints_bleu_by_source_length(tmp_path: Path, capsys) -> None:
    from attnlab.cli.run import train

    folder = tmp_path / "data"
    folder.mkdir()
    words = "ein zwei drei vier fünf sechs sieben acht".split()
    src = [" ".join(words[(i + j) % 8] for j in range(1 + i % 14)) for i in range(64)]
    for split, lines in (("train", src), ("val", src[:24])):
        (folder / f"{split}.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = compose_run([
        *TINY_MODEL, "data=translation", f"data.files.train.src={folder / 'train.de'}",
        f"data.files.train.tgt={folder / 'train.en'}", f"data.files.val.src={folder / 'val.de'}",
        f"data.files.val.tgt={folder / 'val.en'}", "data.tokenizer=char",
        f"data.cache_dir={folder / 'cache'}", "trainer.max_steps=2", "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false", "callbacks=none", "decode.max_new_tokens=8",
    ], run_dir)  # fmt: skip
    result = train(cfg, run_dir)
    assert result["status"] == "completed"
    assert result["bleu_signature"] == bleu_signature()  # summary.json keeps it
    (run_dir / ".hydra").mkdir()
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, run_dir / ".hydra/config.yaml")
    assert attnlab_eval.main([f"run_dir={run_dir}", "by_length=[5,10]"]) == 0
    out = capsys.readouterr().out
    counts = {line.split()[0]: float(line.split()[1]) for line in out.splitlines()
              if line.startswith("test/n_len")}  # fmt: skip
    assert sum(counts.values()) == 24  # every test sentence in one bucket
    assert set(counts) == {"test/n_len_01-05", "test/n_len_06-10", "test/n_len_11+"}
    assert "test/bleu_len_01-05" in out
    assert f"BLEU:       sacreBLEU {bleu_signature()}" in out
    record = json.loads(sorted((run_dir / "eval").glob("*_test.json"))[-1].read_text())
    assert record["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:none|")
    assert attnlab_eval.main([f"run_dir={run_dir}", "by_length=true", "split=val"]) == 2
