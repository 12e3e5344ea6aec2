"""Token labels a person can read: a character split over byte pieces shown as that character.

A byte-level BPE (GPT-2, SmolLM2, Qwen, Llama 3) writes each byte of the text as one printable
character, so a Chinese character (three UTF-8 bytes) shows as mojibake such as 'æĪ' 'ĳ'; a
SentencePiece vocabulary with byte fallback (Gemma, Llama 2) shows a rare character as '<0xE6>'
'<0x88>' '<0x91>'. Decoding each piece alone gives U+FFFD. Here the bytes of consecutive pieces are
decoded together and every character is put on the piece that holds its first byte; a piece that
starts inside a character begins with CONTINUATION ('◌'), and a piece holding only the rest of one
reads '◌' + that character: 我 split in three reads 我, ◌我, ◌我. Pieces whose bytes are all ASCII
keep the tokenizer's own form ('Ġthe', 'Ċ', '▁the', '##ing'), so English labels do not change.
Bytes that form no character (a sequence cut at the end of the input) read '<0xNN>'.

`shown` is the one rule that turns a label or a token's text into what every chart, table,
caption, CSV header and notebook prints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any

CONTINUATION = "◌"  # U+25CC, the dotted circle: "a part of a character"
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# What a tokenizer's own marks stand for: byte-level BPE's space, line break and tab (GPT-2's
# stand-ins for 0x20, 0x0A, 0x09) and SentencePiece's word-start space.
TOKENIZER_MARKS = {"Ġ": " ", "Ċ": "\n", "ĉ": "\t", "▁": " "}
# How each whitespace character is drawn; any other whitespace is drawn as a space.
DRAWN = {" ": "␣", "\n": "⏎", "\r": "␍", "\t": "⇥", "\u3000": "␣", "\xa0": "␣"}
MARKS = ("␣", "⏎", "⇥", CONTINUATION, "<0x")  # what the legend under a chart explains


@lru_cache(maxsize=1 << 16)  # a page draws the same few dozen tokens hundreds of times
def shown(token: str) -> str:
    """A token as every view shows it, the same for its label ('Ġtired', '▁tired') and its text
    (' tired'): each space is one ␣ (never Ġ or ▁), a line break ⏎ (never Ċ or '\\n'), a tab ⇥;
    an ASCII byte piece ('<0x0A>') as its character so drawn; a piece of a multi-byte character
    keeps its label ('◌爱', '<0xE4>': CONTINUATION and the byte mark a part of a character).
    Idempotent: shown(shown(t)) == shown(t). (A Maltese 'Ġ' inside a decoded label reads ␣ too:
    a label no longer says whether it was a mark.)"""
    byte = _BYTE_TOKEN.fullmatch(token)
    if byte is not None and int(byte.group(1), 16) < 0x80:
        token = chr(int(byte.group(1), 16))
    text = (TOKENIZER_MARKS.get(c, c) for c in token)
    return "".join(DRAWN.get(c, "␣" if c.isspace() else c) for c in text)


@cache
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves,
    the other 68 are shifted past 255 in order (so ' ' is 'Ġ' and '\\n' is 'Ċ')."""
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in kept}
    others = [b for b in range(256) if b not in table.values()]
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


def _kind(tokenizer: Any) -> str:
    """ "byte-level", "byte-fallback" or "text" (labels stay the tokens)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    state = decoder.__getstate__() if decoder is not None else b""
    state = state.decode() if isinstance(state, bytes) else str(state)
    if '"ByteLevel"' in state:
        return "byte-level"
    if '"ByteFallback"' in state:
        return "byte-fallback"
    return "text"


def _bytes_of(token: str, kind: str) -> tuple[bytes, bool] | None:
    """(the bytes a piece stands for, whether ASCII bytes keep the piece's own characters), or
    None for a piece that is text (a word piece, a special token)."""
    if kind == "byte-level":
        table = _byte_alphabet()
        if all(c in table for c in token):
            return bytes(table[c] for c in token), True
        return None
    match = _BYTE_TOKEN.fullmatch(token) if kind == "byte-fallback" else None
    return (bytes([int(match.group(1), 16)]), False) if match else None


def _char_length(lead: int) -> int:
    """UTF-8: how many bytes a character starting with this byte has (0: not a lead byte)."""
    if lead < 0x80:
        return 1
    for first, last, n in ((0xC2, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF4, 4)):
        if first <= lead <= last:
            return n
    return 0


def labels_from_tokens(tokens: Sequence[str], kind: str, text: bool = False) -> list[str]:
    """The readable label of each token (see the module's docstring); `kind` as `_kind` says.
    `text`: instead, the text each byte piece adds (its characters, real spaces, no marks; ''
    for a piece that only continues a character), for pieces with a non-ASCII byte; the rest
    stay the tokens."""
    labels = list(tokens)
    if kind == "text":
        return labels
    pieces = [_bytes_of(t, kind) for t in tokens]
    i = 0
    while i < len(tokens):  # one run of consecutive byte pieces at a time
        if pieces[i] is None:
            i += 1
            continue
        j = i
        while j < len(tokens) and pieces[j] is not None:
            j += 1
        _label_run(pieces, labels, i, j, text)
        i = j
    return labels


def _label_run(pieces, labels: list[str], start: int, end: int, text: bool) -> None:
    """Labels (or texts) of tokens[start:end], all byte pieces, from their bytes decoded
    together."""
    stream = [(b, t) for t in range(start, end) for b in pieces[t][0]]  # (byte, its token)
    body = {t: "" for t in range(start, end)}
    continues: dict[int, str] = {}  # token -> the character it starts inside of
    p = 0
    while p < len(stream):
        byte, t = stream[p]
        n = _char_length(byte)
        chunk = bytes(b for b, _ in stream[p : p + n])
        try:
            char = chunk.decode("utf-8") if n and len(chunk) == n else None
        except UnicodeDecodeError:
            char = None
        if char is None:  # not a whole character: the byte itself
            body[t] += "" if text else f"<0x{byte:02X}>"
            p += 1
            continue
        keep = pieces[t][1] and n == 1 and not text  # an ASCII byte: the tokenizer's own char
        body[t] += _stand_in()[byte] if keep else char
        for _, later in stream[p + 1 : p + n]:
            if later != t:
                continues.setdefault(later, char)
        p += n
    for t in range(start, end):
        if all(b < 0x80 for b in pieces[t][0]):
            continue  # the tokenizer's own label: 'Ġthe', 'Ċ', '<0x0A>'
        if text:
            labels[t] = body[t]
            continue
        mark = CONTINUATION if t in continues else ""
        labels[t] = mark + (body[t] or continues.get(t, ""))


@cache
def _stand_in() -> dict[int, str]:
    """The byte-level alphabet the other way round: byte -> its character (0x20 -> 'Ġ')."""
    return {b: c for c, b in _byte_alphabet().items()}


def token_labels(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Readable labels of token ids for views: the tokenizer's tokens, with byte pieces decoded
    (module docstring)."""
    return labels_from_tokens(tokenizer.convert_ids_to_tokens(list(ids)), _kind(tokenizer))


def token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's text such that they join into the decoded text: a piece alone decoded, but a
    character split over byte pieces on its first piece ('' on the rest, never U+FFFD)."""
    ids = list(ids)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    pieces = labels_from_tokens(tokens, _kind(tokenizer), text=True)
    pairs = zip(ids, tokens, pieces, strict=True)
    return [piece if piece != token else tokenizer.decode([i]) for i, token, piece in pairs]


def piece_text(tokenizer: Any, token_id: int) -> str:
    """One token as text (a next-token candidate): decoded alone, or, when that is only part of a
    character (U+FFFD), its label ('<0xE6>')."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return text
    return token_labels(tokenizer, [token_id])[0]
