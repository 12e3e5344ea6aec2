"""Argument checks shared by every public entry point of the engine.

Each check returns the value in its canonical type or raises: TypeError when the value is of the
wrong kind (a string where a number belongs, True where a number belongs, 4.7 where a whole number
belongs), ValueError when it is of the right kind but outside what the engine can do. Every message
names the argument, the value and what to pass instead, and never echoes more than a short,
repr()-quoted piece of user text.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable

from attnviz.engine.budget import budget
from attnviz.engine.errors import EmptyInput
from attnviz.i18n import Message

# Logits are divided by the temperature. Below 1e-3 the factor 1/temperature overflows float32 for
# ordinary scores (1/1e-40 is inf, and inf * 0 is NaN); above 1e3 every row is uniform to float32
# precision. Inside the range softmax is exact up to rounding, and the smallest value already gives
# one-hot rows wherever two scores differ by more than ~0.1.
TEMPERATURE_RANGE = (1e-3, 1e3)
MAX_NAME_CHARS = 256  # a Hub id is at most 96 characters; folders rarely pass 200
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_WORD = re.compile(r"\S+")
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")


def short(value: object, limit: int = 60) -> str:
    """repr() of a value, cut to `limit` characters, for messages that echo user input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "…" + text[-4:]


def whole(name: str, value: object, lo: int = 1, hi: int | None = None) -> int:
    """A whole number in [lo, hi]; bools and floats (even 4.0) are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={short(value)} must be a whole number (an int), not "
                        f"{type(value).__name__}")  # fmt: skip
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        where = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise ValueError(f"{name}={value} must be {where}")
    return value


def number(name: str, value: object, lo: float, hi: float) -> float:
    """A finite real number in [lo, hi]; bools, strings, NaN and inf are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={short(value)} must be a number, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} must be a finite number between {lo:g} and {hi:g}")
    if not lo <= value <= hi:
        raise ValueError(
            f"{name}={value:g} is out of range: pick a number between {lo:g} and {hi:g}"
        )
    return value


def temperature(value: object) -> float:
    """The softmax temperature: a finite number in TEMPERATURE_RANGE (1 = unchanged)."""
    lo, hi = TEMPERATURE_RANGE
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value <= 0:
        raise ValueError(f"temperature={value} must be above 0: pick a number between {lo:g} and "
                         f"{hi:g} (1 = unchanged)")  # fmt: skip
    return number("temperature", value, lo, hi)


def flag(name: str, value: object) -> bool:
    """True or False (numpy bools too); 1, "yes" and None are refused."""
    if type(value).__name__ not in ("bool", "bool_"):
        raise TypeError(f"{name}={short(value)} must be True or False")
    return bool(value)


def text(name: str, value: object) -> str:
    """A sentence: a str of at most the budget's characters, with no lone surrogates."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string (a sentence), not {type(value).__name__}")
    limit = budget().max_text_chars
    if len(value) > limit:
        raise ValueError(
            Message("err.text_long", name=name, n=f"{len(value):,}", limit=f"{limit:,}")
        )
    if _SURROGATE.search(value):
        raise ValueError(
            f"{name} holds a lone surrogate code point (U+D800..U+DFFF), which is not a "
            f"character: remove it or decode the text properly"
        )
    return value


def optional_text(name: str, value: object) -> str | None:
    """A second sentence: None, or a str checked like `text`; blank means None."""
    if value is None:
        return None
    value = text(name, value)
    return value if value.strip() else None


def pairs_of_whole(
    name: str, value: object, what: tuple[str, str] = ("layer", "head")
) -> frozenset[tuple[int, int]]:
    """(layer, head) pairs of whole numbers; (0.5, 1.7) is refused (the caller checks the range
    against its model)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name}={short(value)} must be a list of ({what[0]}, {what[1]}) pairs")
    found = set()
    for item in value:
        if isinstance(item, (str, bytes)) or not isinstance(item, Iterable) or len(item) != 2:
            raise TypeError(f"{name} item {short(item)} must be a ({what[0]}, {what[1]}) pair")
        a = whole(f"{name} {what[0]}", item[0], -(2**31))
        b = whole(f"{name} {what[1]}", item[1], -(2**31))
        found.add((a, b))
    return frozenset(found)


def positions(name: str, value: object, limit: int | None = None) -> tuple[int, ...]:
    """Sorted distinct token positions, whole numbers >= 0 (and < limit when given)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name}={short(value)} must be a list of token positions (ints)")
    hi = None if limit is None else limit - 1
    return tuple(sorted({whole(f"{name} position", p, 0, hi) for p in value}))


def model_name(name: object) -> str | None:
    """None (the bundled model) or a non-empty Hub id / folder of sane length."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"name must be a string (a Hub id or a folder) or None, not "
                        f"{type(name).__name__}")  # fmt: skip
    if not name.strip():
        raise ValueError("name is empty: pass None (or nothing) for the bundled model")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"name has {len(name)} characters: a Hub id or folder has at most "
                         f"{MAX_NAME_CHARS}")  # fmt: skip
    if _CONTROL.search(name) or _SURROGATE.search(name):
        raise ValueError(f"name {short(name)} holds control characters: type a Hub id or a folder")
    return name


def cut_words(value: str, n_words: int, max_chars: int) -> tuple[str, bool]:
    """The first `n_words` whitespace-separated words of `value`, at most `max_chars` characters;
    and whether anything was cut. Linear in the part kept, whatever the length of `value`."""
    head = value[:max_chars]
    end = None
    for i, match in enumerate(_WORD.finditer(head)):
        if i == n_words:
            end = match.start()
            break
    if end is None:
        return head, len(head) < len(value)
    return head[:end], True


def device(value: object) -> object:
    """ "auto", "cpu", "cuda", "cuda:N" (or a torch.device of those); "meta" and the rest refused:
    a model there has no numbers to trace."""
    if not isinstance(value, str) and type(value).__name__ != "device":
        raise TypeError(f'device={short(value)} must be a string such as "auto", "cpu" or "cuda"')
    kind = str(value).split(":", 1)[0]
    if kind not in ("auto", "cpu", "cuda", "mps"):
        raise ValueError(f'device={short(str(value))} cannot run a model for tracing: use "auto", '
                         f'"cpu" or "cuda"')  # fmt: skip
    return value


def model_folder(name: str | None) -> None:
    """A name that is an existing folder must hold a model (config.json); the message repeats the
    name as typed, never the expanded path, and lists nothing."""
    from pathlib import Path

    if name is None:
        return
    try:
        folder = Path(name).expanduser()
        is_dir = folder.is_dir()
    except (OSError, RuntimeError, ValueError):  # a name the file system cannot even look up
        raise ValueError(f"name {short(name)} is neither a model folder nor a Hub id") from None
    if is_dir and not (folder / "config.json").is_file():
        raise ValueError(
            f"{short(name)} is a folder without a config.json, so not a model folder: pass a "
            f"folder saved with save_pretrained(), a Hub id, or nothing for the bundled model"
        )
    path_like = name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1
    if not is_dir and not path_like and not _HUB_ID.fullmatch(name):
        raise ValueError(
            f"{short(name)} is neither a folder nor a Hugging Face id: an id is letters, digits, "
            f"'-', '_' and '.', with at most one '/' (e.g. bert-base-chinese or org/model)"
        )


def model_inputs(
    model: object,
    texts: object,
    text_pairs: object,
    max_length: object,
    batch: int | None = None,
) -> tuple[list[str], list[str | None] | None, int]:
    """The sentences of a pretrained-model trace, checked and cut cheaply, and the token limit;
    `batch`: how many of them one forward holds, for the trace budget (default: all).

    A sentence longer than 4 x (limit + 1) words (or 64 x (limit + 1) characters) is cut there
    before tokenizing: the tokenizer's pair truncation costs time proportional to (length / limit)
    x length, so 600 + 600 words at max_length=5 took seconds; what is cut is past the limit anyway
    (every word gives at least one token), and the trace still says it was truncated.
    """
    if not all(hasattr(model, a) for a in ("call_tokenizer", "max_length", "n_layers", "n_heads")):
        raise TypeError(f"model must come from load_model(), not {type(model).__name__}")
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a list of sentences, not {type(texts).__name__}")
    texts = [text("text", t) for t in texts]
    if not texts:
        raise EmptyInput("texts is empty: give at least one sentence")
    for t in texts:
        if not t.strip():
            raise EmptyInput(f"text {short(t)} is empty: type a sentence to trace")
    pairs = None
    if text_pairs is not None:
        if isinstance(text_pairs, (str, bytes)) or not isinstance(text_pairs, Iterable):
            raise TypeError(f"text_pairs must be a list of sentences or None, not "
                            f"{type(text_pairs).__name__}")  # fmt: skip
        pairs = [optional_text("text_pair", p) for p in text_pairs]
    most = min(model.max_length, budget().max_tokens)
    if max_length is None:
        limit = most
    else:
        limit = whole("max_length", max_length, 4, model.max_length)
        if limit > most:
            raise ValueError(f"max_length={limit} is over this server's token limit {most} "
                             f"(ATTNVIZ_MAX_TOKENS): pick at most {most}")  # fmt: skip
    # The trace's bytes and work are checked once the input's real length is known (tracing).
    n_words, n_chars = 4 * (limit + 1), 64 * (limit + 1)
    texts = [cut_words(t, n_words, n_chars)[0] for t in texts]
    if pairs is not None:
        pairs = [None if p is None else cut_words(p, n_words, n_chars)[0] for p in pairs]
    return texts, pairs, limit


def knobs(
    use_scale: object, temperature_: object, ablate: object, mask_tokens: object
) -> tuple[bool, float, frozenset[tuple[int, int]], tuple[int, ...]]:
    """The what-if knobs of a pretrained-model trace, in their canonical types."""
    return (
        flag("use_scale", use_scale),
        temperature(temperature_),
        pairs_of_whole("ablate", ablate),
        positions("mask_tokens", mask_tokens),
    )
