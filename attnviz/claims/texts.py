"""The texts claims are measured on: Debian's fortunes (English) where installed, else attnviz's
own English probe texts; and lists of random words said twice (the induction claims). Everything
is seeded: the same call gives the same texts."""

from __future__ import annotations

import random
import re
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
# English files of Debian's `fortunes` package read in this order (any that exist)
FILES = ("fortunes", "wisdom", "literature", "science", "people", "humorists", "computers", "work")
WORD = re.compile(r"^[a-z]{3,9}$")


def source() -> str:
    """Where the texts come from, for a record."""
    found = [f for f in FILES if (FORTUNES / f).is_file()]
    if found:
        return f"Debian fortunes ({FORTUNES}: {', '.join(found)})"
    return "attnviz's English probe texts (Debian's fortunes is not installed)"


def fortunes() -> list[str]:
    """Every English fortune, in file order (whitespace collapsed), or the probe texts."""
    out = []
    for name in FILES:
        path = FORTUNES / name
        if not path.is_file():
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        out += [" ".join(p.split()) for p in raw.split("\n%\n") if p.strip()]
    if out:
        return out
    from attnviz.measures.roles import probe_list

    return probe_list("en")


def long_texts(n: int, chars: int, seed: int = 0) -> list[str]:
    """`n` texts of at least `chars` characters, each consecutive fortunes joined by blank lines,
    starting at seeded places."""
    items = fortunes()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        i = rng.randrange(len(items))
        parts, size = [], 0
        while size < chars:
            parts.append(items[i % len(items)])
            size += len(parts[-1]) + 2
            i += 1
        out.append("\n\n".join(parts))
    return out


def words(seed: int = 0) -> list[str]:
    """The distinct lowercase words of the texts (3 to 9 letters), sorted: what random word lists
    are drawn from."""
    found = {w for t in fortunes() for w in re.findall(r"[A-Za-z]+", t)}
    return sorted(w.lower() for w in found if WORD.match(w.lower()))


def said_twice(n_texts: int, n_words: int = 30, seed: int = 0) -> list[tuple[str, str]]:
    """`n_texts` (first copy, whole text) pairs: `n_words` random words, then the same again."""
    pool = words()
    rng = random.Random(seed)
    out = []
    for _ in range(n_texts):
        first = " ".join(rng.sample(pool, n_words))
        out.append((first, f"{first} {first}"))
    return out
