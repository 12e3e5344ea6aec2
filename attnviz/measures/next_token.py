"""A decoder's next-token prediction, and how a what-if knob changed it (Transformer Explainer
shows the first; the diff is attnviz's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnviz.engine.trace import Trace


@dataclass(frozen=True)
class NextToken:
    """One candidate: its probability now and, when compared, under the unchanged model."""

    token_id: int
    token: str
    p: float  # probability in this trace
    rank: int  # 1 = most likely in this trace
    p_base: float | None = None  # probability under the unchanged model (None: not compared)
    rank_base: int | None = None

    def __post_init__(self) -> None:
        for name in ("p", "p_base"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0 + 1e-6:
                raise ValueError(f"{name}={value} is not a probability")

    @property
    def delta(self) -> float | None:
        return None if self.p_base is None else self.p - self.p_base


def probabilities(trace: Trace) -> torch.Tensor:
    """softmax of the logits after the last token. [vocab]"""
    if trace.next_logits is None:
        raise ValueError("this trace has no next-token logits: trace a decoder model")
    return torch.softmax(trace.next_logits.float(), dim=-1)  # [vocab]


def _ranks(trace: Trace, ids: list[int]) -> list[int]:
    """Each token id's rank after the last token: the logits above its logit, plus 1 (a tie
    shares the better rank). On the logits: a knob that demotes a token far enough rounds its
    float32 probability to 0, among thousands of others at 0, whose order says nothing. One
    comparison for every id at once."""
    logits = trace.next_logits.float()  # [vocab]
    chosen = logits[torch.tensor(ids, dtype=torch.long)]  # [ids]
    return ((logits[None, :] > chosen[:, None]).sum(1) + 1).tolist()


def top_k(
    trace: Trace,
    decode: Callable[[int], str],
    k: int = 10,
    base: Trace | None = None,
) -> list[NextToken]:
    """The k most likely next tokens, most likely first. With `base` (the same input through the
    unchanged model) each row also carries its base probability, and base's own top k that fell
    out of this trace's top k are appended, so a knob that demotes the favourite shows it."""
    if k < 1:
        raise ValueError(f"k={k} must be at least 1")
    p = probabilities(trace)  # [vocab]
    k = min(k, p.shape[0])
    ids = p.topk(k).indices.tolist()
    p_base = None
    if base is not None:
        p_base = probabilities(base)  # [vocab]
        if p_base.shape != p.shape:
            raise ValueError(f"vocabularies differ: {p.shape[0]} vs {p_base.shape[0]}")
        ids += [i for i in p_base.topk(k).indices.tolist() if i not in ids]
    ranks = _ranks(trace, ids)
    ranks_base = [None] * len(ids) if base is None else _ranks(base, ids)
    p_ids = p[ids].tolist()
    p_base_ids = [None] * len(ids) if p_base is None else p_base[ids].tolist()
    return [
        NextToken(token_id=i, token=decode(i), p=pi, rank=r, p_base=pb, rank_base=rb)
        for i, pi, r, pb, rb in zip(ids, p_ids, ranks, p_base_ids, ranks_base, strict=True)
    ]


def next_tokens(
    model: object, trace: Trace, k: int = 10, base: Trace | None = None
) -> list[NextToken]:
    """The public form of `top_k`: the k most likely next tokens after a decoder `trace` of
    `model` (from attnviz.load_model), decoded with the model's tokenizer; with `base` (the same
    text traced without the what-if knobs) each carries its probability there too."""
    from attnviz.engine.hooked.labels import piece_text

    tokenizer = model.tokenizer  # type: ignore[attr-defined]
    return top_k(trace, lambda i: piece_text(tokenizer, i), k, base)  # never U+FFFD
