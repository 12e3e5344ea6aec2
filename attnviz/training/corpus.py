"""Text to train on: Debian's fortune files (fortunes-zh, fortunes), read as records, split
into train and validation, each file recorded by size and sha256 so a run can be reproduced."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

FORTUNE_DIR = Path("/usr/share/games/fortunes")
# Chinese: 唐诗三百首, 宋词 and sayings (fortunes-zh, GPL-3); English: the fortunes package's
# files, offensive ones excluded (Debian ships those in fortunes-off, not installed).
POEMS = ("tang300", "song100")
CHINESE = ("chinese",)
ENGLISH = (
    "art", "computers", "cookie", "definitions", "disclaimer", "drugs", "education", "ethnic",
    "food", "fortunes", "goedel", "humorists", "kids", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news",
    "paradoxum", "people", "perl", "pets", "platitudes", "politics", "pratchett", "riddles",
    "science", "songs-poems", "sports", "startrek", "tao", "translate-me", "wisdom", "work",
    "zippy",
)  # fmt: skip
STREAMS = {"poems": POEMS, "chinese": CHINESE, "english": ENGLISH}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # fortunes-zh colours titles and authors


@dataclass(frozen=True)
class CorpusFile:
    """One file read: enough to check that a later run reads the same bytes."""

    stream: str
    path: str
    bytes: int
    sha256: str
    records: int


@dataclass
class Corpus:
    """Records per stream, split: every `val_every`-th record of a file goes to validation."""

    train: dict[str, list[str]] = field(default_factory=dict)
    val: dict[str, list[str]] = field(default_factory=dict)
    files: list[CorpusFile] = field(default_factory=list)

    def text(self, split: str, stream: str) -> str:
        """A stream's records joined by blank lines: the text windows are cut from."""
        return "\n\n".join(getattr(self, split)[stream])

    def chars(self) -> Iterable[str]:
        for records in self.train.values():
            for r in records:
                yield from r


def records(raw: str) -> list[str]:
    """A fortune file's records: split on lines holding only '%', colours stripped."""
    text = _ANSI.sub("", raw.replace("\r\n", "\n"))
    parts = re.split(r"\n%\n|^%\n", text)
    return [p.strip("\n") for p in parts if p.strip()]


def read(
    folder: Path = FORTUNE_DIR,
    streams: dict[str, tuple[str, ...]] | None = None,
    val_every: int = 20,
) -> Corpus:
    """Read the fortune files that exist; raise if a stream has none (install the packages)."""
    corpus = Corpus()
    for stream, names in (streams or STREAMS).items():
        corpus.train[stream], corpus.val[stream] = [], []
        for name in names:
            path = folder / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            recs = records(data.decode("utf-8", errors="replace"))
            for i, r in enumerate(recs):
                split = corpus.val if i % val_every == val_every - 1 else corpus.train
                split[stream].append(r)
            digest = hashlib.sha256(data).hexdigest()
            corpus.files.append(CorpusFile(stream, str(path), len(data), digest, len(recs)))
        if not corpus.train[stream]:
            raise FileNotFoundError(
                f"no {stream} text in {folder} ({', '.join(names)}): install Debian's "
                "fortunes-zh and fortunes (apt-get install fortunes-zh fortunes)"
            )
    return corpus
