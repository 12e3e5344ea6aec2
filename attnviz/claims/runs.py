"""Running a decoder for a claim: its tokens as a trace would read them, the loss of every token
(with heads silenced, the what-if `ablate`), and the size of the residual stream entering each
block. Logits are projected only where asked, a chunk of positions at a time: Gemma 3's 262k
vocabulary over 512 positions would be 0.5 GB."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

from attnviz.engine.hooked.intercept import Call
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.request import Knobs

CHUNK = 128  # positions projected onto the vocabulary at once


def ids_of(model: LoadedModel, text: str, limit: int | None = None) -> list[int]:
    """The token ids a trace of `text` reads (special tokens the tokenizer adds included), at
    most `limit` of them."""
    with model.call_lock:
        enc = model.call_tokenizer(text, truncation=limit is not None, max_length=limit)
    return list(enc["input_ids"])


def _base(model: LoadedModel) -> torch.nn.Module:
    return model.model.base_model


def _logits(model: LoadedModel, hidden: torch.Tensor) -> torch.Tensor:
    """The model's logits from final hidden states (its own head, soft-capping and scaling).
    [rows, d_model] -> [rows, vocab]"""
    config = model.model.config
    logits = model.model.get_output_embeddings()(hidden)  # [rows, vocab]
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    scaling = getattr(config, "logits_scaling", None)
    return logits / scaling if scaling else logits


def _batch(model: LoadedModel, batch: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
    n = max(len(ids) for ids in batch)
    pad = model.tokenizer.pad_token_id or 0
    ids = torch.full((len(batch), n), pad, dtype=torch.long)  # [batch, n], padded on the right
    mask = torch.zeros_like(ids)
    for b, row in enumerate(batch):
        ids[b, : len(row)] = torch.tensor(row)
        mask[b, : len(row)] = 1
    dev = torch.device(model.device)
    return {"input_ids": ids.to(dev), "attention_mask": mask.to(dev)}


def token_losses(
    model: LoadedModel,
    batch: Sequence[Sequence[int]],
    ablate: Iterable[tuple[int, int]] = (),
) -> list[torch.Tensor]:
    """For each token list, the loss (nats) of every token after the first, predicted from the
    ones before, with the heads in `ablate` silenced: [n - 1] per list (entry t - 1: token t)."""
    knobs = Knobs(ablate=frozenset((int(la), int(h)) for la, h in ablate))
    inputs = _batch(model, batch)
    with torch.inference_mode():
        hidden = _base(model)(**inputs, attnviz_call=Call(knobs)).last_hidden_state  # [b, n, d]
        out = []
        for b, row in enumerate(batch):
            targets = torch.tensor(row[1:], device=hidden.device)  # [n - 1]
            losses = []
            for start in range(0, len(row) - 1, CHUNK):
                h = hidden[b, start : min(start + CHUNK, len(row) - 1)]  # [rows, d]
                logp = F.log_softmax(_logits(model, h).float(), dim=-1)  # [rows, vocab]
                t = targets[start : start + len(h)]
                losses.append(-logp.gather(1, t[:, None])[:, 0])  # [rows]
            out.append(torch.cat(losses).cpu())
    return out


def stream_norms(model: LoadedModel, ids: Sequence[int]) -> torch.Tensor:
    """‖h‖ of every token's residual stream entering each block. [layer, n]"""
    inputs = _batch(model, [ids])
    with torch.inference_mode():
        out = _base(model)(**inputs, output_hidden_states=True, attnviz_call=Call())
    states = out.hidden_states[: model.n_layers]  # the input of each block, [1, n, d] each
    return torch.stack([s[0].float().norm(dim=-1) for s in states]).cpu()  # [layer, n]
