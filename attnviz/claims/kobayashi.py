"""Kobayashi et al. 2020 (Attention is Not Only a Weight): weighting each attention weight by the
size of what its key sends, ‖α f(x)‖ (attnviz's `moved`), shrinks the share of the special tokens
[CLS] and [SEP] that the raw weights show, in BERT; measured on MiniLM (the same architecture).

Per layer, the share of the weights and of `moved` on special tokens (attnviz.special_share, the
mean over heads), averaged over texts: fortunes of at most 60 words, each traced alone."""

from __future__ import annotations

import time

import torch

from attnviz.claims import texts
from attnviz.claims.record import Record, verdict
from attnviz.claims.setting import Setting, command, link
from attnviz.engine.hooked import trace_model
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.measures.stats import special_share

SOURCE = "Kobayashi et al. 2020, Attention is Not Only a Weight (EMNLP), §4: [CLS] and [SEP]"


def short_texts(n: int, seed: int) -> list[str]:
    """`n` fortunes of 8 to 60 words, taken evenly through the file (deterministic)."""
    fit = [t for t in texts.fortunes() if 8 <= len(t.split()) <= 60]
    step = max(1, len(fit) // n)
    return fit[seed % step :: step][:n]


def shares(model: LoadedModel, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights' and moved's share on special tokens per layer, mean over heads and texts.
    ([layer], [layer])"""
    raw, moved = [], []
    for text in sentences:
        frame = special_share(trace_model(model, text)).groupby("layer")
        raw.append(torch.tensor(frame["weights_special"].mean().to_numpy()))
        moved.append(torch.tensor(frame["moved_special"].mean().to_numpy()))
    return torch.stack(raw).mean(0), torch.stack(moved).mean(0)


def special_tokens(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    start = time.perf_counter()
    sentences = short_texts(s.special_texts, s.seed)
    if model.kind != "encoder":
        return _not_encoder(name, start)
    raw, moved = shares(model, sentences)  # [layer] each
    shrinks = int((moved < raw).sum())
    ok = shrinks > len(raw) / 2 and float(moved.mean()) < float(raw.mean())
    v, reason = verdict(ok, (
        f"moved's share on [CLS]/[SEP] is below the weights' in {shrinks} of {len(raw)} layers "
        f"(mean {float(moved.mean()):.1%} against {float(raw.mean()):.1%}); criterion: lower on "
        "average and in more than half the layers"
    ))  # fmt: skip
    return Record(
        claim="kobayashi",
        statement="Weighting attention by ‖f(x)‖ (moved) shrinks the share of [CLS] and [SEP] that "
        "raw attention weights show.",
        source=SOURCE,
        model=name,
        numbers={
            "weights_share_mean": float(raw.mean()),
            "moved_share_mean": float(moved.mean()),
            "layers_shrunk": shrinks,
            "layers": len(raw),
            "texts": len(sentences),
        },
        verdict=v,
        reason=reason,
        command=command("kobayashi", name),
        figure={"weights": raw.tolist(), "moved": moved.tolist()},
        link=link("pretrained", pick=name, view="stats", field="moved", text=sentences[0]),
        seconds=time.perf_counter() - start,
    )


def _not_encoder(name: str, start: float) -> Record:
    return Record(
        claim="kobayashi",
        statement="Weighting attention by ‖f(x)‖ shrinks the share of [CLS] and [SEP].",
        source=SOURCE,
        model=name,
        numbers={},
        verdict="not comparable",
        reason=f"{name} is not an encoder with [CLS] and [SEP]",
        command=command("kobayashi", name),
        seconds=time.perf_counter() - start,
    )
