"""attnlab.bench.data: the generated corpus, the memory poll, and a whole tiny run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnlab.bench import data as bench


def test_the_generated_corpus_has_the_size_asked_in_shuffled_documents(tmp_path: Path) -> None:
    docs = [f"document {i}\nwith two lines" for i in range(50)]
    paths = bench.make_corpus(tmp_path, 0.01, docs, file_mb=0.004)  # 10 kB in 4 kB files
    assert len(paths) == 3
    text = "".join(p.read_text() for p in paths)
    assert 10_000 <= len(text.encode()) < 10_000 + 40
    first = [d.split("\n")[0] for d in text.split("\n\n") if d][:50]
    assert sorted(first) != first and set(first) == {d.split("\n")[0] for d in docs}


def test_peak_memory_counts_the_child_processes(tmp_path: Path) -> None:
    grow = ("import multiprocessing as mp, time\n"
            "def hold(): b = b'x' * (300 * 2**20); time.sleep(1.0)\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=hold); p.start(); p.join()\n")
    script = tmp_path / "grow.py"
    script.write_text(grow)
    assert bench.measured([sys.executable, str(script)])["peak_rss_mb"] > 300


@pytest.mark.slow
def test_a_tiny_data_benchmark_runs_every_part(tmp_path: Path, shared_data: Path) -> None:
    result = bench.run_data([2, 4], 1, [1], 1, work=tmp_path, step_rounds=1)
    assert [r["corpus_mb"] for r in result["prepare"]] == [2, 4]
    assert all(r["tokens"] > 0 and r["peak_rss_mb"] > 0 for r in result["prepare"])
    assert result["workers"]["speedup_2_over_1"] > 0
    assert result["text_way"][0]["text_bytes_per_corpus_byte"] > 0
    assert set(result["loader_tokens_per_s"]) == {"random", "sequential"}
    assert result["step"]["tokens_over_text"] > 0
