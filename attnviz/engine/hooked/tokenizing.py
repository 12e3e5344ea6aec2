"""A loaded model's two tokenizer objects, read and copied without parsing the vocabulary twice.

A trace tokenizes with its own copy of the tokenizer (LoadedModel.call_tokenizer: truncation and
padding are settings stored on the Rust tokenizer, so calls with different settings must not share
it with the views' decoding). copy.deepcopy of a fast tokenizer writes its whole vocabulary to JSON
and parses it back: 2-4 s for Gemma 3's 262k tokens and 515k merges. The copy here is a second
Rust tokenizer around the same (read-only) vocabulary model, with the same normalizer,
pre-tokenizer, post-processor, decoder and added tokens, and its own settings.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

GENERIC = "TokenizersBackend"  # transformers' fast class that only parses tokenizer.json in Rust
PARTS = ("normalizer", "pre_tokenizer", "post_processor", "decoder")


def read(source: str, local_only: bool) -> Any:
    """The tokenizer saved at `source` (a folder or a Hub id). A folder saved for the generic
    fast class (the GGUF cache writes one) is read without transformers' legacy pass, which
    parses the whole tokenizer.json in Python (1-3 s for Gemma) only to list the added tokens
    that the Rust tokenizer holds anyway."""
    from transformers import AutoTokenizer

    if not _generic(Path(source)):
        return AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    tokenizer = AutoTokenizer.from_pretrained(
        source, local_files_only=True, added_tokens_decoder={}
    )
    added = tokenizer.added_tokens_decoder
    kwargs = tokenizer.init_kwargs  # as the legacy pass leaves them: special tokens as AddedTokens
    kwargs["added_tokens_decoder"] = dict(added)
    by_text = {str(token): token for token in added.values()}
    for found in (kwargs, tokenizer._special_tokens_map):
        for key, value in found.items():
            if key.endswith("_token") and isinstance(value, str) and value in by_text:
                found[key] = by_text[value]
    return tokenizer


def compact_merges(path: Path) -> bool:
    """Rewrite a BPE tokenizer.json's merges as "a b" strings instead of ["a", "b"] pairs, when
    no piece holds a space (the string form splits at it). tokenizers reads the strings in about
    half the time: Gemma 3's 515k merges 0.98 s against 1.76 s, the largest part of a cached
    load. True when the file was rewritten (atomically)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data.get("model") if isinstance(data, dict) else None
    merges = model.get("merges") if isinstance(model, dict) else None
    if not merges or model.get("type") != "BPE" or not all(isinstance(m, list) for m in merges):
        return False
    if any(len(m) != 2 or " " in m[0] or " " in m[1] for m in merges):
        return False
    model["merges"] = [f"{a} {b}" for a, b in merges]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    os.replace(tmp, path)
    return True


def _generic(folder: Path) -> bool:
    try:
        if not (folder / "tokenizer.json").is_file():
            return False
        settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(settings, dict) and settings.get("tokenizer_class") == GENERIC


def call_copy(tokenizer: Any) -> Any:
    """An independent copy of `tokenizer` for traces: its Python state deep-copied, its Rust
    tokenizer a twin sharing the vocabulary (a plain deep copy when that is not possible)."""
    backend = getattr(tokenizer, "_tokenizer", None)
    twin = _twin(backend) if backend is not None else None
    memo = {} if twin is None else {id(backend): twin}
    added = getattr(tokenizer, "init_kwargs", {}).get("added_tokens_decoder")
    if isinstance(added, dict):  # its own dict of the same AddedTokens (read-only): deep-copying
        memo[id(added)] = dict(added)  # Gemma's 6,384 took 0.3 s
    return copy.deepcopy(tokenizer, memo)


def _twin(backend: Any) -> Any:
    """A new tokenizers.Tokenizer reading with `backend`'s model and parts, or None when the
    twin would not have the same added tokens."""
    from tokenizers import Tokenizer

    if not isinstance(backend, Tokenizer):
        return None
    twin = Tokenizer(backend.model)  # shares the model (vocabulary, merges), read-only
    for part in PARTS:
        value = getattr(backend, part)
        if value is not None:
            setattr(twin, part, value)
    added = backend.get_added_tokens_decoder()
    twin.add_tokens([added[i] for i in sorted(added)])  # same order: same ids
    twin.encode_special_tokens = backend.encode_special_tokens
    if backend.truncation is not None:
        twin.enable_truncation(**backend.truncation)
    if backend.padding is not None:
        twin.enable_padding(**backend.padding)
    got = twin.get_added_tokens_decoder()
    same = got.keys() == added.keys() and all(
        (str(got[i]), got[i].special) == (str(added[i]), added[i].special) for i in added
    )
    return twin if same and twin.get_vocab_size() == backend.get_vocab_size() else None
