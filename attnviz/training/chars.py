"""A character-level tokenizer in the Hugging Face format (tokenizer.json), so a trained model
loads with AutoTokenizer like any other: one token per character, the most frequent characters
of the training text, [UNK] for the rest, [BOS] before every input."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

SPECIALS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
PAD, UNK, BOS, EOS = range(4)


def vocabulary(chars: Iterable[str], size: int, always: str = "") -> list[str]:
    """The special tokens, the characters of `always` (those not already among the most
    frequent), then the most frequent characters up to `size` tokens (ties by code point, so the
    list does not depend on the order the text was read in)."""
    counts = Counter(chars)
    for s in SPECIALS:
        counts.pop(s, None)
    ranked = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    keep = size - len(SPECIALS)
    extra = [c for c in dict.fromkeys(always) if c not in ranked[:keep]]
    top = [c for c in ranked if c not in extra][: keep - len(extra)]
    return list(SPECIALS) + extra + top


def encoder(vocab: list[str]) -> dict[str, int]:
    return {c: i for i, c in enumerate(vocab)}


def encode(text: str, ids: dict[str, int]) -> list[int]:
    """The ids of `text`'s characters, without [BOS]: what the tokenizer gives after [BOS]."""
    return [ids.get(c, UNK) for c in text]


def hf_tokenizer(vocab: list[str], max_length: int):
    """A PreTrainedTokenizerFast over `vocab`: every character one token (whitespace included),
    [BOS] prepended, decoding joins characters without spaces."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=encoder(vocab), unk_token="[UNK]"))
    # Every character its own piece, newlines and spaces too: isolated single-character splits.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", pair="[BOS] $A $B", special_tokens=[("[BOS]", BOS)]
    )
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )


def save(vocab: list[str], folder: Path, max_length: int) -> None:
    hf_tokenizer(vocab, max_length).save_pretrained(str(folder))
