"""Olsson et al. 2022 (In-context Learning and Induction Heads): the in-context score and the
prefix-matching score of induction heads.

In-context score: the loss of token 500 minus the loss of token 50, on natural text (consecutive
Debian fortunes), each averaged with the `icl_window` tokens either side and over the texts (a
few texts, where the paper averages thousands). Negative: later tokens are predicted better,
from the context. Prefix matching: on random words said twice, the mean weight a head puts on the
token that followed the current token's earlier occurrence (the atlas's `induction` score,
attnviz.measures.roles); the heads are the atlas's (head_roles on the probe texts) and the words
are new to them."""

from __future__ import annotations

import time

import pandas as pd
import torch

from attnviz.claims import runs, texts
from attnviz.claims.record import Record, verdict
from attnviz.claims.setting import Setting, command, link
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.measures.roles import THRESHOLDS, head_roles

SOURCE = (
    "Olsson et al. 2022, In-context Learning and Induction Heads, Argument 1 (in-context score)"
)
PREFIX_SOURCE = (
    "Olsson et al. 2022, §Definitions: the prefix-matching score on repeated random tokens"
)


def atlas_induction(model: LoadedModel) -> pd.DataFrame:
    """Every head's induction score over attnviz's probe texts, best first (the head atlas)."""
    frame = head_roles(model)
    return frame.sort_values("induction", ascending=False, kind="stable").reset_index(drop=True)


def shared_atlas(model: LoadedModel, shared: dict | None) -> pd.DataFrame:
    """The atlas's induction ranking, measured once a run (kept in the run's `shared` dict for
    the model)."""
    if shared is None:
        return atlas_induction(model)
    if "atlas" not in shared:
        shared["atlas"] = atlas_induction(model)
    return shared["atlas"]


def top_heads(frame: pd.DataFrame, k: int) -> list[tuple[int, int]]:
    return [(int(r.layer), int(r.head)) for r in frame.head(k).itertuples()]


def loss_curve(model: LoadedModel, s: Setting) -> tuple[torch.Tensor, int]:
    """The mean loss of every token position over the texts, and how many texts. [n - 1]"""
    chosen = texts.long_texts(s.icl_texts, 8 * s.icl_tokens, s.seed + 3)
    batch = [runs.ids_of(model, t, s.icl_tokens) for t in chosen]
    batch = [ids for ids in batch if len(ids) == s.icl_tokens]
    if not batch:
        raise ValueError(f"no text reached {s.icl_tokens} tokens")
    losses = runs.token_losses(model, batch)
    return torch.stack(losses).mean(0), len(batch)  # [n - 1]


def in_context(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    start = time.perf_counter()
    statement = (
        f"Tokens late in a context are predicted better than early ones: the in-context score "
        f"(loss at token {s.icl_late} minus loss at token {s.icl_early}) is negative."
    )
    if model.kind != "decoder" or model.max_length < s.icl_tokens:
        return Record("in_context", statement, SOURCE, name, {}, "not comparable",
                      f"{name} reads at most {model.max_length} tokens, not {s.icl_tokens}",
                      command("in_context", name), seconds=time.perf_counter() - start)  # fmt: skip
    curve, n_texts = loss_curve(model, s)  # curve[t - 1]: token t's loss
    w = s.icl_window
    early = float(curve[s.icl_early - 1 - w : s.icl_early + w].mean())
    late = float(curve[s.icl_late - 1 - w : s.icl_late + w].mean())
    score = late - early
    v, reason = verdict(score < 0, (
        f"loss {late:.2f} nats at token {s.icl_late} against {early:.2f} at token {s.icl_early} "
        f"(±{w} tokens, {n_texts} texts): score {score:+.2f}; criterion: below 0"
    ))  # fmt: skip
    return Record(
        claim="in_context",
        statement=statement,
        source=SOURCE,
        model=name,
        numbers={"score": score, "loss_early": early, "loss_late": late, "texts": n_texts},
        verdict=v,
        reason=reason,
        command=command("in_context", name),
        paper={"score": "negative after the phase change"},
        figure={"loss": curve.tolist(), "early": s.icl_early, "late": s.icl_late},
        link=link("pretrained", pick=name, view="overview"),
        seconds=time.perf_counter() - start,
    )


def prefix_matching(
    model: LoadedModel, name: str, s: Setting, shared: dict | None = None
) -> Record:
    start = time.perf_counter()
    atlas = shared_atlas(model, shared)
    heads = top_heads(atlas, s.knock_k)
    twice = [whole for _, whole in texts.said_twice(s.twice_texts, s.twice_words, s.seed + 2)]
    fresh = head_roles(model, twice).set_index(["layer", "head"])["induction"]
    scores = [float(fresh.loc[h]) for h in heads]
    best = fresh.idxmax()
    threshold = THRESHOLDS["induction"]
    v, reason = verdict(scores[0] >= threshold, (
        f"the atlas's top induction head L{heads[0][0]}H{heads[0][1]} puts {scores[0]:.2f} of its "
        f"weight on the token after the earlier occurrence, on {len(twice)} new texts of "
        f"{s.twice_words} random words said twice (best of all heads: L{best[0]}H{best[1]} "
        f"{float(fresh.max()):.2f}); criterion: the atlas's induction threshold, {threshold}"
    ))  # fmt: skip
    return Record(
        claim="prefix_matching",
        statement="The atlas's induction heads, found on attnviz's probe texts, attend from a "
        "repeated token to the token that followed it last time on new repeated text.",
        source=PREFIX_SOURCE,
        model=name,
        numbers={
            "top_head": f"L{heads[0][0]}H{heads[0][1]}",
            "top_score": scores[0],
            "atlas_score": float(atlas["induction"].iloc[0]),
            "best_head": f"L{best[0]}H{best[1]}",
            "best_score": float(fresh.max()),
            "heads_over_threshold": int((fresh >= threshold).sum()),
            "heads": len(fresh),
        },
        verdict=v,
        reason=reason,
        command=command("prefix_matching", name),
        figure={
            "heads": [f"L{la}H{h}" for la, h in heads],
            "scores": scores,
            "atlas": atlas["induction"].head(len(heads)).tolist(),
        },  # fmt: skip
        link=link(
            "atlas", at_pick=name, at_layer=heads[0][0], at_head=heads[0][1], at_role="induction"
        ),  # fmt: skip
        seconds=time.perf_counter() - start,
    )
