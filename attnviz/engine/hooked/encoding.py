"""Tokenizing for a trace: the padded batch, each input's untruncated length, the special tokens,
and what an encoder-decoder's decoder reads."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnviz.engine.hooked.families import SPECIAL_ROLES
from attnviz.engine.hooked.loading import LoadedModel


def encode(
    model: LoadedModel, texts: list[str], pairs: list[str] | None, limit: int
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Tokenized batch (truncated to `limit`, padded) and each item's untruncated length."""
    tok = model.call_tokenizer
    texts = [one_bos(model, text) for text in texts]
    with model.call_lock:
        # One token past the limit tells "fits" from "was cut" in one pass in the common case.
        enc = tok(
            texts, pairs, truncation=True, max_length=limit + 1, padding=True, return_tensors="pt"
        )
        lengths = enc["attention_mask"].sum(-1).tolist()  # [batch]
        if max(lengths) <= limit:
            return dict(enc), lengths
        enc = tok(
            texts, pairs, truncation=True, max_length=limit, padding=True, return_tensors="pt"
        )
        full = tok(texts, pairs, verbose=False)["input_ids"]
    return dict(enc), [len(ids) for ids in full]


def one_bos(model: LoadedModel, text: str) -> str:
    """`text` less a leading BOS written out ("<bos><start_of_turn>user...", a chat template's own
    bos_token) where the tokenizer adds its BOS anyway: one BOS, not two. Two would make the
    second position a sink of its own and distort every figure read at the first token (Gemma 3's
    GGUF: add_bos_token, and its template starts with {{ bos_token }})."""
    tok = model.tokenizer
    bos = getattr(tok, "bos_token", None)
    if model.kind != "decoder" or not bos or not isinstance(text, str) or not text.startswith(bos):
        return text
    adds = getattr(model, "_adds_bos", None)
    if adds is None:
        with model.call_lock:
            ids = model.call_tokenizer("a")["input_ids"]
        adds = bool(ids) and ids[0] == tok.bos_token_id
        object.__setattr__(model, "_adds_bos", adds)
    return text[len(bos) :] if adds else text


def special_positions(
    model: LoadedModel, ids: list[int], attention: list[int]
) -> dict[str, list[int]]:
    found = {}
    for label, attr in SPECIAL_ROLES.items():
        token_id = getattr(model.tokenizer, attr, None)
        found[label] = [i for i, t in enumerate(ids) if token_id is not None and t == token_id]
    # Padding is what the attention mask leaves out (a GPT-2 tokenizer pads with its end token).
    found["[PAD]"] = [i for i, a in enumerate(attention) if not a]
    return found


def collate(model: LoadedModel, encs: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Single encodings ([1, n_i] each) as one batch padded on the right, as the tokenizer pads."""
    n = max(enc["input_ids"].shape[1] for enc in encs)
    pad_id = model.call_tokenizer.pad_token_id
    if pad_id is None:  # a decoder without a pad token: what fills the masked tail is never read
        pad_id = model.call_tokenizer.eos_token_id or 0
    fill = {"input_ids": pad_id, "attention_mask": 0, "token_type_ids": 0}
    out = {}
    for name in encs[0]:
        rows = [F.pad(e[name], (0, n - e[name].shape[1]), value=fill.get(name, 0)) for e in encs]
        out[name] = torch.cat(rows)  # [batch, n]
    return out


def decoder_inputs(model: LoadedModel, targets: list[str], limit: int) -> dict[str, torch.Tensor]:
    """What the decoder reads: its start token, then the target text's tokens (padded)."""
    start = model.model.config.decoder_start_token_id
    enc, _ = encode(model, targets, None, limit - 1)
    ids = enc["input_ids"]  # [batch, m]
    first = torch.full((ids.shape[0], 1), start, dtype=ids.dtype)  # [batch, 1]
    ones = torch.ones_like(first)  # [batch, 1]
    return {
        "input_ids": torch.cat([first, ids], 1),  # [batch, m + 1]
        "attention_mask": torch.cat([ones, enc["attention_mask"]], 1),  # [batch, m + 1]
    }
