"""Which tokens make one word, or one character: spans of consecutive pieces, read from the token
strings alone (a trace keeps no tokenizer).

How a tokenizer marks its pieces tells them apart:
- WordPiece (BERT): "##" starts a piece that continues the word before it.
- SentencePiece (Llama 2, Gemma, Mistral): "▁" stands for the space before a word; a character
  outside the vocabulary is split into byte pieces "<0xE6>" "<0x88>" "<0x91>".
- byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2): every byte is a printable character ("Ġ" is a
  space, "Ċ" a newline), so a Chinese character is often two or three pieces ('æĪ', 'ĳ'); a
  traced model's tokens are labels that read them '我', '◌我', '◌我' (engine/hooked/labels.py).
- character-level (attnviz-char-zh-en): one character a token, the space a token of its own.
- attnviz's toy stack: its tokens are words, CJK characters and punctuation already (so is a
  text with no piece marks at all, every word in a WordPiece vocabulary: "words").

Characters: consecutive pieces are merged until their bytes end on a whole UTF-8 character, so
a character split into byte pieces reads as one. Words: a character group starts a new word when
it starts with a space (a space alone joins the word after it), is a special token, a CJK
character or punctuation, or follows one of the last three; WordPiece starts a word at every
piece without "##".
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache, cached_property

import torch

from attnviz.engine.hooked.labels import CONTINUATION
from attnviz.engine.tokenize import _CJK_RE

SCHEMES = ("wordpiece", "metaspace", "bytes", "chars", "words")
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPECIAL = re.compile(r"^(\[[A-Z]+\]|<\|[^|]*\|>|</?[a-z_]+>|<[a-z_]+_\d+>)$")
_NOT_MARKERS = ("unk", "pad", "mask")


def is_marker(token: str) -> bool:
    """A special token that marks a place ([CLS], [SEP], [BOS], <s>, </s>, <|endoftext|>, <bos>),
    not one that stands for text ([UNK], <unk>), padding or a mask."""
    return bool(_SPECIAL.match(token)) and token.strip("[]<>|/").lower() not in _NOT_MARKERS


@cache
def byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in of each byte (GPT-2's choice: printable Latin-1
    characters stand for themselves, the other bytes for U+0100 onwards), inverted: char -> byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    chars, shifted = {}, 0
    for b in range(256):
        if b in kept:
            chars[chr(b)] = b
        else:
            chars[chr(256 + shifted)] = b
            shifted += 1
    return chars


@dataclass(frozen=True)
class Groups:
    """Consecutive pieces grouped: `spans` [start, end) of each group over n pieces, in order and
    covering every piece, and a label for each (the group's text, its space marks dropped)."""

    spans: tuple[tuple[int, int], ...]
    labels: tuple[str, ...]

    @property
    def n(self) -> int:
        return self.spans[-1][1] if self.spans else 0

    def __len__(self) -> int:
        return len(self.spans)

    @cached_property
    def _starts(self) -> torch.Tensor:
        return torch.tensor([s for s, _ in self.spans], dtype=torch.long)  # [groups]

    @cached_property
    def _sizes(self) -> torch.Tensor:
        return torch.tensor([e - s for s, e in self.spans], dtype=torch.long)  # [groups]

    def of_piece(self) -> torch.Tensor:
        """The group of each piece. [n] long"""
        return torch.repeat_interleave(torch.arange(len(self.spans)), self._sizes)

    def group_at(self, piece: int) -> int:
        """The group holding a piece."""
        return int(torch.searchsorted(self._starts, piece, right=True)) - 1

    def sizes(self, groups: torch.Tensor) -> torch.Tensor:
        """How many pieces each of these groups holds. [len(groups)] long"""
        return self._sizes[groups]

    def pieces(self, groups: torch.Tensor) -> torch.Tensor:
        """The pieces of these groups, in the groups' order. [pieces] long"""
        sizes = self._sizes[groups]
        firsts = torch.repeat_interleave(self._starts[groups], sizes)  # [pieces]
        before = torch.repeat_interleave(sizes.cumsum(0) - sizes, sizes)  # [pieces]
        return firsts + torch.arange(int(sizes.sum())) - before

    def local(self, groups: torch.Tensor) -> torch.Tensor:
        """For each piece of `pieces(groups)`, the index of its group in `groups`. [pieces]"""
        return torch.repeat_interleave(torch.arange(len(groups)), self._sizes[groups])


def reduce(
    x: torch.Tensor, rows: Groups, row_sel: torch.Tensor, cols: Groups, col_sel: torch.Tensor
) -> torch.Tensor:
    """x over the pieces of the selected row and column groups [..., row pieces, col pieces] to
    [..., len(row_sel), len(col_sel)]: summed over each column group's pieces, averaged over each
    row group's. Linear in the cells (index_add), never a dense indicator product."""
    x = x.float()
    shape = list(x.shape)
    shape[-1] = len(col_sel)
    summed = torch.zeros(shape).index_add_(x.dim() - 1, cols.local(col_sel), x)  # [..., r, c']
    shape[-2] = len(row_sel)
    out = torch.zeros(shape).index_add_(x.dim() - 2, rows.local(row_sel), summed)  # [..., r', c']
    return out / rows.sizes(row_sel).unsqueeze(-1).float()


def scheme(tokens: Sequence[str], special: Collection[int] = (), source: str = "") -> str:
    """How these tokens were cut (one of SCHEMES), from their marks."""
    if source == "stack":
        return "words"
    plain = [t for i, t in enumerate(tokens) if i not in special and not _SPECIAL.match(t)]
    if any(t.startswith("##") and len(t) > 2 for t in plain):
        return "wordpiece"
    if any("▁" in t or _BYTE_PIECE.match(t) for t in plain):
        return "metaspace"
    if any(t.startswith(CONTINUATION) and len(t) > 1 for t in plain):
        return "bytes"  # byte pieces labelled as characters (attnviz.engine.hooked.labels)
    alphabet = byte_alphabet()
    if plain and all(c in alphabet for t in plain for c in t):
        if any(ord(c) >= 256 for t in plain for c in t):  # "Ġ", "Ċ": a byte-level mark
            return "bytes"
        raw = bytes(alphabet[c] for t in plain for c in t)
        try:
            if raw.decode("utf-8") != "".join(plain):  # Latin-1 stand-ins of UTF-8 ('Ã©')
                return "bytes"
        except UnicodeDecodeError:
            pass
    # one character a token (attnviz-char-zh-en); longer tokens with no mark of a piece that
    # continues a word are words already (a WordPiece text whose words are all in the vocabulary)
    return "chars" if all(len(t) == 1 for t in plain) else "words"


def _raw(token: str, how: str) -> bytes:
    """A piece's bytes as the tokenizer meant them."""
    if how == "bytes":
        alphabet = byte_alphabet()
        if all(c in alphabet for c in token):
            return bytes(alphabet[c] for c in token)
    if how == "metaspace":
        m = _BYTE_PIECE.match(token)
        if m:
            return bytes([int(m.group(1), 16)])
        token = token.replace("▁", " ")
    if how == "wordpiece" and token.startswith("##"):
        token = token[2:]
    return token.encode("utf-8")


def _char_spans(tokens: Sequence[str], how: str, special: Collection[int]) -> list[tuple]:
    """(start, end, text) of the smallest runs of pieces that hold whole characters."""
    spans, start, text = [], 0, ""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for i, tok in enumerate(tokens):
        if i in special or _SPECIAL.match(tok):
            if i > start:  # an unfinished character before it ends here
                spans.append((start, i, text + decoder.decode(b"", final=True)))
                decoder.reset()
            spans.append((i, i + 1, tok))
            start, text = i + 1, ""
            continue
        if _continues(tok) and i == start and spans and not _own(tokens, spans[-1][0], special):
            # a labelled byte piece inside the character before it (labels: '我', '◌我', '◌我'),
            # or ending it and starting the next ('◌B' after 'A'): one run of pieces
            s, _, done = spans[-1]
            rest = tok[len(CONTINUATION) :]
            spans[-1] = (s, i + 1, done if done.endswith(rest) else done + rest)
            start = i + 1
            continue
        text += decoder.decode(_raw(tok, how))
        if decoder.getstate()[0] == b"":  # the bytes so far end on a whole character
            spans.append((start, i + 1, text))
            start, text = i + 1, ""
    if start < len(tokens):
        spans.append((start, len(tokens), text + decoder.decode(b"", final=True)))
    return spans


def _continues(token: str) -> bool:
    """A piece labelled as the rest of a character (attnviz.engine.hooked.labels: '◌我')."""
    return token.startswith(CONTINUATION) and len(token) > len(CONTINUATION)


def _own(tokens: Sequence[str], i: int, special: Collection[int]) -> bool:
    """A special token: a group of its own."""
    return i in special or bool(_SPECIAL.match(tokens[i]))


def _is_alone(text: str) -> bool:
    """A group that is a word by itself: one CJK character, or punctuation alone."""
    core = text.strip()
    if len(core) == 1 and _CJK_RE.match(core):
        return True
    return bool(core) and all(unicodedata.category(c).startswith("P") for c in core)


def groups_of(
    tokens: Sequence[str], by: str, special: Collection[int] = (), source: str = ""
) -> Groups:
    """The groups of a trace's tokens: by "char" (byte pieces of one character merged) or
    "word". `special`: positions of special tokens (each a group of its own)."""
    if by not in ("word", "char"):
        raise ValueError(f'by={by!r} must be "word" or "char"')
    how = scheme(tokens, special, source)
    special = set(special)
    chars = _char_spans(tokens, how, special)
    if by == "char" or how == "words":
        return Groups(tuple((s, e) for s, e, _ in chars), tuple(_label(t) for *_, t in chars))
    merged: list[list] = []
    alone_before = True
    for s, e, text in chars:
        own = s in special or bool(_SPECIAL.match(tokens[s]) and e == s + 1)
        alone = own or _is_alone(text)
        starts = alone_before or alone or text[:1].isspace() or not merged
        if how == "wordpiece":
            starts = starts or not tokens[s].startswith("##")
        if merged and merged[-1][2].isspace() and not own and not alone_before:
            starts = False  # a space on its own ("▁", " ") belongs to the word after it
        if starts:
            merged.append([s, e, text])
        else:
            merged[-1][1], merged[-1][2] = e, merged[-1][2] + text
        alone_before = alone
    return Groups(tuple((s, e) for s, e, _ in merged), tuple(_label(t) for *_, t in merged))


def _label(text: str) -> str:
    return text.strip() or text
