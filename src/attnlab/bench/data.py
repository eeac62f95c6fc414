"""The data path at scale: attnlab-prepare's memory and speed, the loader, the step.

    python -m attnlab.bench.data --sizes-mb 200,1024,2048 --json data.json
    attnlab-bench --only data

1. A JSON-lines corpus is generated from the shared texts to each size asked: each
   document joins 1–119 of Tiny Shakespeare's paragraphs and Multi30k's English
   sentences (about 4.8 kB, as web text), shuffled anew each repetition. ``attnlab-prepare``
   tokenizes it with one byte-level BPE (8192 tokens, trained once on the shared texts
   and given by path, or ``--tokenizer``: a tokenizer.json or .tiktoken file) in 2 worker
   processes, in turns with the tiktoken stream: the same BPE's ranks in tiktoken,
   ``encode_ordinary`` per document into a ``uint16`` file from a pool of 2 processes
   (:data:`STREAM`, 20 lines), the floor of tokenizing in Python. Peak memory is the
   largest sum of the proportional resident memory (PSS) of a command's processes,
   polled every 0.1 s.
2. Worker scaling: 1 against 2 workers on one corpus, in turns.
3. ``data=text``'s way (read the whole corpus, tokenize it in one process, keep it as one
   tensor) at sizes it can hold: its peak memory per corpus byte beside attnlab-prepare's.
4. The loader: ``data=tokens``' training batches of 1024-token blocks, tokens a second in
   one process, random and sequential.
5. A training step from ``data=tokens`` against ``data=text`` on the same tokens (Tiny
   Shakespeare, characters, nanoGPT's baby GPT): whole runs in turns, step time from
   ``perf/train_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from attnlab.bench.startup import REPO, no_shakespeare, run_env, shared_root


def base_documents(root: Path) -> list[str]:
    """Tiny Shakespeare's paragraphs and Multi30k's English training sentences."""
    import gzip

    text = (root / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    docs = [p.strip() for p in text.split("\n\n") if p.strip()]
    multi30k = root / "multi30k" / "train.en.gz"
    if multi30k.is_file():
        with gzip.open(multi30k, "rt", encoding="utf-8") as handle:
            docs += [line.strip() for line in handle if line.strip()]
    return docs


def make_corpus(folder: Path, megabytes: float, docs: list[str], seed: int = 0,
                file_mb: int = 256) -> list[Path]:  # fmt: skip
    """Files of shuffled documents adding up to ``megabytes``, blank-line separated."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    target, written, paths = int(megabytes * 1e6), 0, []
    handle, in_file = None, 0
    while written < target:
        order = docs[:]
        rng.shuffle(order)
        for doc in order:
            if handle is None or in_file >= file_mb * 1e6:
                if handle is not None:
                    handle.close()
                paths.append(folder / f"part_{len(paths):03d}.txt")
                handle, in_file = open(paths[-1], "w", encoding="utf-8"), 0
            chunk = doc + "\n\n"
            handle.write(chunk)
            in_file += len(chunk.encode())
            written += len(chunk.encode())
            if written >= target:
                break
    if handle is not None:
        handle.close()
    return paths


def make_jsonl_corpus(path: Path, megabytes: float, docs: list[str], seed: int = 0,
                      most: int = 119) -> Path:  # fmt: skip
    """A JSON-lines file of about ``megabytes``: each record's ``text`` joins 1 to
    ``most`` of ``docs`` (shuffled, blank-line separated)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    target, written, order, at = int(megabytes * 1e6), 0, [], 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            k = rng.randint(1, most)
            if at + k > len(order):
                order, at = docs[:], 0
                rng.shuffle(order)
            line = json.dumps({"text": "\n\n".join(order[at : at + k])}) + "\n"
            at += k
            handle.write(line)
            written += len(line.encode())
    return path


# the tiktoken stream: the fastest way to tokenize in Python, for comparison
STREAM = """
import json, sys, numpy as np, tiktoken
from multiprocessing import Pool
from tiktoken.load import load_tiktoken_bpe
ranks, pattern, corpus, out, workers = sys.argv[1:6]
def start():
    global enc
    enc = tiktoken.Encoding("stream", pat_str=pattern, mergeable_ranks=load_tiktoken_bpe(ranks),
                            special_tokens={})
def encode(lines):
    ids = [np.array(enc.encode_ordinary(json.loads(line)["text"]) + [2], np.uint16)
           for line in lines]
    return np.concatenate(ids)
def batches(handle, n=256):
    while lines := [line for _, line in zip(range(n), handle)]:
        yield lines
if __name__ == "__main__":
    with open(corpus) as handle, open(out, "wb") as sink, Pool(int(workers), start) as pool:
        for ids in pool.imap(encode, batches(handle)):
            ids.tofile(sink)
"""


def write_ranks(bpe: Any, path: Path) -> Path:
    """A :class:`~attnlab.data.tiktoken_bpe.ByteBPE`'s ranks as a ``.tiktoken`` file."""
    import base64

    lines = (f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(bpe.ranks.items(),
                                                                       key=lambda i: i[1]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _tree_rss(pid: int) -> int:
    """Proportional resident bytes (PSS: a page shared by n processes counts 1/n in each,
    so forked workers' shared pages count once) of ``pid`` and its descendants (Linux)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    todo += [int(c) for c in handle.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measured(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``command``; its wall time, peak process-tree RSS and output."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    peak = 0
    done = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    out, err = proc.communicate()
    done.set()
    poller.join()
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(command[:4])} … exited {proc.returncode}:\n"
                         f"{(out + err)[-2000:]}")  # fmt: skip
    return {"wall_s": time.perf_counter() - started, "peak_rss_mb": peak / 2**20, "stdout": out}


def prepare_command(inputs: list[Path], out: Path, tokenizer: Path, workers: int,
                    val_fraction: float = 0.001) -> list[str]:  # fmt: skip
    unit = [] if all(p.suffix == ".jsonl" for p in inputs) else ["--unit", "paragraph"]
    return [sys.executable, "-m", "attnlab.prepare", *map(str, inputs), "--out", str(out),
            "--tokenizer", str(tokenizer), *unit, "--val-fraction", str(val_fraction),
            "--workers", str(workers)]  # fmt: skip


def _env() -> dict[str, str]:
    # one thread a tokenizing process, so worker counts compare processes, not threads
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "RAYON_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def _tokens(folder: Path) -> int:
    index = json.loads((folder / "index.json").read_text())
    return sum(split["tokens"] for split in index["splits"].values())


def side_by_side(tmp: Path, docs: list[str], tokenizer: Path, ranks: Path, pattern: str,
                 sizes_mb: list[float], rounds: int) -> list[dict[str, Any]]:  # fmt: skip
    """attnlab-prepare (2 workers) and the tiktoken stream (2 processes) on one JSON-lines
    corpus per size, in turns (ABAB…): wall time, peak memory and their ratios."""
    rows = []
    for mb in sizes_mb:
        corpus = make_jsonl_corpus(tmp / f"corpus_{mb:g}.jsonl", mb, docs)
        times: dict[str, list[float]] = {"attnlab": [], "stream": []}
        peaks: dict[str, list[float]] = {"attnlab": [], "stream": []}
        counts = {}
        for r in range(rounds):
            for who in (("attnlab", "stream") if r % 2 == 0 else ("stream", "attnlab")):
                out = tmp / f"out_{who}_{mb:g}"
                if who == "attnlab":
                    # attnlab's default held-out share (more for a tiny corpus's few records)
                    share = 0.005 if mb >= 64 else 0.05
                    run = measured(prepare_command([corpus], out, tokenizer, 2, share), _env())
                    counts[who] = _tokens(out)
                else:
                    run = measured([sys.executable, "-c", STREAM, str(ranks), pattern,
                                    str(corpus), str(out), "2"], _env())  # fmt: skip
                    counts[who] = out.stat().st_size // 2
                times[who].append(run["wall_s"])
                peaks[who].append(run["peak_rss_mb"])
                _remove(out)
        n = counts["attnlab"]
        a, b = statistics.median(times["attnlab"]), statistics.median(times["stream"])
        row = {"corpus_mb": mb, "workers": 2, "tokens": n, "wall_s": a, "tokens_per_s": n / a,
               "peak_rss_mb": max(peaks["attnlab"]), "stream_tokens": counts["stream"],
               "stream_wall_s": b, "stream_peak_rss_mb": max(peaks["stream"]),
               "attnlab_over_stream": a / b, "rounds": {"wall_s": times, "peak_rss_mb": peaks}
               }  # fmt: skip
        rows.append(row)
        print(f"prepare {mb:>7g} MB, 2 workers: {n / 1e6:8.1f} M tokens, attnlab {a:6.1f} s "
              f"({n / a / 1e6:.2f} M/s, peak {max(peaks['attnlab']):.0f} MiB), tiktoken stream "
              f"{b:6.1f} s (peak {max(peaks['stream']):.0f} MiB): {a / b:.2f}× (medians of "
              f"{rounds})", flush=True)  # fmt: skip
        corpus.unlink()
    return rows


def _remove(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    elif path.exists():
        path.unlink()


def worker_scaling(tmp: Path, docs: list[str], tokenizer: Path, mb: float, rounds: int
                   ) -> dict[str, Any]:  # fmt: skip
    corpus = make_corpus(tmp / "corpus_workers", mb, docs, seed=1)
    times: dict[int, list[float]] = {1: [], 2: []}
    for r in range(rounds):
        for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
            out = tmp / f"shards_w{workers}_{r}"
            times[workers].append(measured(prepare_command(corpus, out, tokenizer, workers),
                                           _env())["wall_s"])  # fmt: skip
            n = _tokens(out)
            _remove(out)
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"workers on {mb:g} MB: 1 → {n / one / 1e6:.2f} M tokens/s, 2 → {n / two / 1e6:.2f} "
          f"M tokens/s: {one / two:.2f}× (medians of {rounds})", flush=True)
    return {"corpus_mb": mb, "tokens": n, "wall_s": {"1": times[1], "2": times[2]},
            "speedup_2_over_1": one / two}  # fmt: skip


TEXT_WAY = """
import sys, time
from attnlab.data.text import TextDataModule
t = time.perf_counter()
m = TextDataModule(path=sys.argv[1], tokenizer="bpe", vocab_size=8192, cache_dir=sys.argv[2])
m.prepare_data()
print(len(m.splits["train"]) + len(m.splits["val"]), time.perf_counter() - t)
"""
BASELINE = "import attnlab.data.text, attnlab.prepare"


def text_way(tmp: Path, docs: list[str], tokenizer: Path, sizes_mb: list[float]
             ) -> list[dict[str, Any]]:  # fmt: skip
    """data=text's peak memory against attnlab-prepare's on the same one-file corpus."""
    base = measured([sys.executable, "-c", BASELINE], _env())["peak_rss_mb"]
    rows = []
    for mb in sizes_mb:
        (corpus,) = make_corpus(tmp / f"corpus_text_{mb:g}", mb, docs, seed=2, file_mb=10**6)
        text = measured([sys.executable, "-c", TEXT_WAY, str(corpus), str(tmp / "cache")],
                        {**os.environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
        shards = measured(prepare_command([corpus], tmp / f"shards_text_{mb:g}", tokenizer, 2),
                          _env())  # fmt: skip
        row = {"corpus_mb": mb, "import_rss_mb": base, "text_peak_rss_mb": text["peak_rss_mb"],
               "prepare_peak_rss_mb": shards["peak_rss_mb"],
               "text_bytes_per_corpus_byte": (text["peak_rss_mb"] - base) / mb * 1.048576,
               "text_wall_s": text["wall_s"], "prepare_wall_s": shards["wall_s"]}  # fmt: skip
        rows.append(row)
        print(f"data=text at {mb:g} MB: peak {row['text_peak_rss_mb']:.0f} MiB "
              f"({row['text_bytes_per_corpus_byte']:.1f} bytes per corpus byte above the "
              f"{base:.0f} MiB of imports); attnlab-prepare: {row['prepare_peak_rss_mb']:.0f} MiB",
              flush=True)  # fmt: skip
        corpus.unlink()
    return rows


def loader_speed(folder: Path, seconds: float = 3.0) -> dict[str, float]:
    """Tokens a second of data=tokens' training batches (16 × 1025), in this process."""
    from attnlab.data.shards import open_split
    from attnlab.data.tokens import TokenBatches

    stream = open_split(folder, "train")
    out = {}
    for sampling in ("random", "sequential"):
        data = TokenBatches(stream, 1024, 16, sampling, 0, 10**9)
        n, started, step = 0, time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            n += data.batch(step)["tokens"].numel()
            step += 1
        out[sampling] = n / (time.perf_counter() - started)
        print(f"loader, {sampling}: {out[sampling] / 1e6:.1f} M tokens/s per process "
              "(batches of 16 × 1025)", flush=True)
    return out


STEP_RUN = [sys.executable, "-m", "attnlab.train", "experiment=nanogpt_shakespeare_char_cpu",
            "trainer.max_steps=500", "test=false", "trainer.limit_val_batches=0",
            "trainer.enable_progress_bar=false"]  # fmt: skip


def step_parity(tmp: Path, root: Path, rounds: int) -> dict[str, Any]:
    """Step time of the baby GPT from data=tokens / from data=text, whole runs in turns."""
    from attnlab.bench.race_nanogpt import summary_of

    text = root / "tinyshakespeare" / "input.txt"
    train, val = tmp / "shakespeare_train.txt", tmp / "shakespeare_val.txt"
    whole = text.read_text(encoding="utf-8")
    cut = int(len(whole) * 0.9)
    train.write_text(whole[:cut], encoding="utf-8")
    val.write_text(whole[cut:], encoding="utf-8")
    folder = tmp / "shakespeare_tokens"
    subprocess.run([sys.executable, "-m", "attnlab.prepare", str(train), "--val", str(val),
                    "--unit", "file", "--tokenizer", "char", "--out", str(folder),
                    "--workers", "0"], check=True, env=_env(), capture_output=True)  # fmt: skip
    env = run_env(root, tmp / "logs")
    # the preset's own split (the last 10 % of characters validates) is the same cut
    ways = {"text": [],
            "tokens": ["data=tokens", f"data.path={folder}", "data.block_size=64",
                       "data.batch_size=12"]}  # fmt: skip
    times: dict[str, list[float]] = {"text": [], "tokens": []}
    for r in range(rounds):
        for way in (("text", "tokens") if r % 2 == 0 else ("tokens", "text")):
            done = subprocess.run([*STEP_RUN, *ways[way]], env=env, cwd=tmp, capture_output=True,
                                  text=True)  # fmt: skip
            summary = summary_of(done.stdout)
            if done.returncode != 0 or not summary:
                tail = (done.stdout + done.stderr)[-2000:]
                raise SystemExit(f"error: the {way} run failed:\n{tail}")
            times[way].append(float(summary["metrics"]["perf/train_s"]) / 500)
    ratio = statistics.median(t / x for t, x in zip(times["tokens"], times["text"], strict=True))
    print(f"training step, data=tokens / data=text: {ratio:.3f} (median of {rounds} rounds; "
          f"{statistics.median(times['tokens']) * 1e3:.1f} vs "
          f"{statistics.median(times['text']) * 1e3:.1f} ms)", flush=True)
    return {"step_s": times, "tokens_over_text": ratio}


def bench_tokenizer(tmp: Path, docs: list[str], given: Path | None) -> tuple[Path, Path, str]:
    """The tokenizer file attnlab-prepare is given, the same BPE's ``.tiktoken`` ranks for
    the stream, and its split expression."""
    from attnlab.data.tiktoken_bpe import from_hf_json, read_tiktoken_file
    from attnlab.data.tokenizers import BPETokenizer

    if given is not None and given.suffix == ".tiktoken":
        return given, given, read_tiktoken_file(given, 0).pattern
    if given is None:
        given = tmp / "bpe8192.json"
        BPETokenizer.train(docs, 8192).save(given)
    bpe, why = from_hf_json(given.read_text(encoding="utf-8"))
    if bpe is None:
        raise SystemExit(f"error: --tokenizer {given}: tiktoken cannot express it ({why})")
    return given, write_ranks(bpe, tmp / "bench.tiktoken"), bpe.pattern


def run_data(sizes_mb: list[float], workers_mb: float, text_mb: list[float], rounds: int,
             work: Path | None = None, step_rounds: int | None = None,
             tokenizer: Path | None = None) -> dict[str, Any]:  # fmt: skip
    root = shared_root()
    if (skipped := no_shakespeare(root)) is not None:
        return skipped
    docs = base_documents(root)
    with tempfile.TemporaryDirectory(prefix="attnlab_data_bench_", dir=work) as name:
        tmp = Path(name)
        given, ranks, pattern = bench_tokenizer(tmp, docs, tokenizer)
        result: dict[str, Any] = {"prepare": side_by_side(tmp, docs, given, ranks, pattern,
                                                          sizes_mb, max(2, rounds - 1))}
        if len(sizes_mb) > 1:
            a, b = result["prepare"][0], result["prepare"][-1]
            result["rss_ratio_largest_to_smallest"] = b["peak_rss_mb"] / a["peak_rss_mb"]
        result["workers"] = worker_scaling(tmp, docs, given, workers_mb, rounds)
        result["text_way"] = text_way(tmp, docs, given, text_mb)
        loader_folder = tmp / "shards_loader"
        subprocess.run(prepare_command(make_corpus(tmp / "corpus_loader", min(sizes_mb), docs),
                                       loader_folder, given, 2), check=True, env=_env(),
                       capture_output=True)  # fmt: skip
        result["loader_tokens_per_s"] = loader_speed(loader_folder)
        result["step"] = step_parity(tmp, root, step_rounds or rounds)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab.bench.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", default="200,1024,2048", help="corpus sizes to prepare")
    parser.add_argument("--tokenizer", type=Path,
                        help="a byte-level BPE tokenizer.json or .tiktoken file (default: a "
                             "BPE of 8192 trained on the shared texts)")  # fmt: skip
    parser.add_argument("--workers-mb", type=float, default=128, help="corpus for 1 vs 2 workers")
    parser.add_argument("--text-mb", default="50,100", help="sizes for data=text's way")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 1 vs 2 workers")
    parser.add_argument("--step-rounds", type=int, default=5, help="rounds of the step parity")
    parser.add_argument("--work", type=Path, help="where the corpora go (default: the temp dir)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run_data([float(s) for s in args.sizes_mb.split(",")], args.workers_mb,
                      [float(s) for s in args.text_mb.split(",")], args.rounds, args.work,
                      args.step_rounds, args.tokenizer)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
