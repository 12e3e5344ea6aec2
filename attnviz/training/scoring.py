"""Next-character accuracy and loss of a trained model on held-out text, against the unigram and
bigram baselines fitted on the training text: the numbers bench/trained.py prints."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnviz.training.chars import BOS


@dataclass(frozen=True)
class Score:
    """Mean next-character cross-entropy (nats) and top-1 accuracy over `n` predictions."""

    loss: float
    accuracy: float
    n: int


@dataclass(frozen=True)
class Ngrams:
    """Unigram and bigram log-probabilities fitted on training ids (add-one smoothed; the bigram
    interpolated with the unigram, so an unseen pair is not impossible)."""

    unigram: torch.Tensor  # [vocab] log-probabilities
    bigram: torch.Tensor  # [vocab, vocab] log P(next | previous)


def fit(train: list[torch.Tensor], vocab: int, mix: float = 0.9) -> Ngrams:
    counts = torch.ones(vocab, dtype=torch.float64)  # add-one
    pairs = torch.zeros(vocab * vocab, dtype=torch.float64)
    for ids in train:
        counts += torch.bincount(ids, minlength=vocab).double()
        pairs += torch.bincount(ids[:-1] * vocab + ids[1:], minlength=vocab * vocab).double()
    uni = counts / counts.sum()  # [vocab]
    pairs = pairs.view(vocab, vocab) + 1.0 / vocab  # [prev, next], a fraction of one added
    bi = mix * pairs / pairs.sum(-1, keepdim=True) + (1 - mix) * uni  # [prev, next]
    return Ngrams(uni.log().float(), bi.log().float())


def chunks(ids: torch.Tensor, context: int, limit: int | None = None) -> torch.Tensor:
    """Non-overlapping windows of [BOS] + (context - 1) ids: [n, context]."""
    span = context - 1
    n = ids.numel() // span if limit is None else min(limit, ids.numel() // span)
    body = ids[: n * span].view(n, span)  # [n, span]
    return torch.cat([torch.full((n, 1), BOS, dtype=ids.dtype), body], dim=1)  # [n, context]


def _score(logp: torch.Tensor, targets: torch.Tensor) -> Score:
    # logp: [n, vocab] log-probabilities, targets: [n]
    loss = F.nll_loss(logp, targets)
    acc = (logp.argmax(-1) == targets).float().mean()
    return Score(round(float(loss), 4), round(float(acc), 4), int(targets.numel()))


def score_ngrams(ngrams: Ngrams, windows: torch.Tensor) -> tuple[Score, Score]:
    """(unigram, bigram) on every prediction after [BOS] in `windows` [n, context]."""
    prev, nxt = windows[:, :-1].flatten(), windows[:, 1:].flatten()  # [n * (context - 1)]
    uni = ngrams.unigram.expand(nxt.numel(), -1)  # [p, vocab]
    bi = ngrams.bigram[prev]  # [p, vocab]; after [BOS] the row of [BOS]: the unigram
    bi[prev == BOS] = ngrams.unigram
    return _score(uni, nxt), _score(bi, nxt)


@torch.no_grad()
def score_model(model: torch.nn.Module, windows: torch.Tensor, batch: int = 8) -> Score:
    """The model's next-character loss and accuracy on `windows` [n, context]."""
    logps, targets = [], []
    for i in range(0, windows.shape[0], batch):
        x = windows[i : i + batch]  # [b, context]
        logits = model(input_ids=x).logits[:, :-1].float()  # [b, context - 1, vocab]
        logps.append(logits.log_softmax(-1).flatten(0, 1))
        targets.append(x[:, 1:].flatten())
    return _score(torch.cat(logps), torch.cat(targets))
