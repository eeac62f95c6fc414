"""Where the real data sets come from: what ``attnlab-data`` fetches into the data folder.

Each set lands in the layout the presets of ``conf/data/`` read. Two kinds of source:

* a published file, fetched byte for byte and checked against its SHA-256 (Tiny
  Shakespeare from char-rnn, Multi30k's task-1 release), both at a fixed commit;
* a Hugging Face dataset, each split written as plain text that the presets or
  ``attnlab-prepare`` read, and checked by its row count (SST-2, WikiText-103), or the
  first ``documents`` records of a streamed sample (FineWeb-Edu).

The SHA-256 of each published file is that of the file at the pinned commit of its
repository; row counts are those the datasets publish.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_CHAR_RNN = ("https://raw.githubusercontent.com/karpathy/char-rnn/"
             "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare")  # fmt: skip
_MULTI30K = ("https://raw.githubusercontent.com/multi30k/dataset/"
             "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw")  # fmt: skip
FINEWEB_DOCUMENTS = 100_000  # FineWeb-Edu's default sample: ≈ 100 M GPT-2 tokens, ≈ 0.5 GB


@dataclass(frozen=True)
class PublishedFile:
    """A file fetched as published: ``path`` in the data folder, its ``url`` and digest."""

    path: str
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class HubSplit:
    """One split of a Hugging Face dataset, written to ``path`` (``{documents}`` is filled
    in for a sample); ``rows``: the split's published row count, None for a sample."""

    split: str
    path: str
    rows: int | None


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face dataset (``repo``, ``config``) and how its rows become lines:
    ``tsv`` (SST-2's label and sentence), ``text`` (a line per row) or ``jsonl``."""

    repo: str
    config: str
    form: str
    splits: tuple[HubSplit, ...]
    streaming: bool = False  # a sample of a corpus too large to download whole


@dataclass(frozen=True)
class DataSet:
    """A data set ``attnlab-data NAME`` fetches, with what ``--list`` and the docs say."""

    name: str
    source: str  # where it comes from, for --list
    size: str  # what it takes on disk
    files: tuple[PublishedFile, ...] = ()
    hub: HubSource | None = None
    then: str | None = None  # what to run next: "prepare" when attnlab-prepare reads it

    def paths(self, documents: int | str = FINEWEB_DOCUMENTS) -> list[str]:
        """The files it writes, relative to the data folder (``documents``: a sample's size,
        or ``*`` for a glob of every size)."""
        if self.hub is not None:
            return [s.path.format(documents=documents) for s in self.hub.splits]
        return [f.path for f in self.files]


def _multi30k(split: str, lang: str, sha256: str, size: int) -> PublishedFile:
    name = f"{split}.{lang}.gz"
    return PublishedFile(f"multi30k/{name}", f"{_MULTI30K}/{name}", sha256, size)


SETS: dict[str, DataSet] = {s.name: s for s in (
    DataSet("shakespeare", "github.com/karpathy/char-rnn (data/tinyshakespeare)", "1.1 MB", files=(
        PublishedFile("tinyshakespeare/input.txt", f"{_CHAR_RNN}/input.txt",
                      "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                      1_115_394),
    )),
    DataSet("multi30k", "github.com/multi30k/dataset (data/task1/raw, de-en)", "1.3 MB", files=(
        _multi30k("train", "de", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
                  637_044),
        _multi30k("train", "en", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
                  568_929),
        _multi30k("val", "de", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
                  24_681),
        _multi30k("val", "en", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
                  21_650),
        _multi30k("test_2016_flickr", "de",
                  "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8", 22_890),
        _multi30k("test_2016_flickr", "en",
                  "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9", 21_077),
    )),
    DataSet("sst2", "Hugging Face nyu-mll/glue (sst2)", "3.8 MB", hub=HubSource(
        "nyu-mll/glue", "sst2", "tsv", (
            HubSplit("train", "sst2/train.tsv", 67_349),
            HubSplit("validation", "sst2/dev.tsv", 872),  # the test split's labels are hidden
        ))),
    DataSet("wikitext103", "Hugging Face Salesforce/wikitext (wikitext-103-raw-v1)", "0.54 GB",
            then="prepare", hub=HubSource("Salesforce/wikitext", "wikitext-103-raw-v1", "text", (
                HubSplit("train", "wikitext103/train.txt", 1_801_350),
                HubSplit("validation", "wikitext103/validation.txt", 3_760),
                HubSplit("test", "wikitext103/test.txt", 4_358),
            ))),
    DataSet("fineweb-edu", "Hugging Face HuggingFaceFW/fineweb-edu (sample-10BT), streamed",
            f"≈ 0.5 GB per {FINEWEB_DOCUMENTS:,} documents", then="prepare", hub=HubSource(
                "HuggingFaceFW/fineweb-edu", "sample-10BT", "jsonl", (
                    HubSplit("train", "fineweb-edu/sample-10BT-{documents}.jsonl", None),
                ), streaming=True)),
)}  # fmt: skip


def set_holding(path: str | os.PathLike, root: str | os.PathLike) -> str | None:
    """The name of the data set that writes ``path`` into the data folder ``root``, if any."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    for data_set in SETS.values():
        if relative in data_set.paths():
            return data_set.name
    return None
