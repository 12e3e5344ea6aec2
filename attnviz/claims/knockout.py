"""The induction knock-out: silencing the atlas's top-k induction heads (k = 1..6) against 20
random sets of k other heads, on the loss of the second copy of random words said twice.

Said twice, a word list's second copy is predictable only from the first: its loss falls far
below the first copy's. The induction benefit B = loss(first copy) - loss(second copy); silencing
heads (the what-if `ablate`: their z zeroed before W_O) raises the second copy's loss by some
share of B. The claim (a circuit of 3-6 heads is causally necessary for induction) passes where,
for some k <= 6, the top-k heads' knock-out takes back at least half of B and more than every
random set of k heads."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import torch

from attnviz.claims import runs, texts
from attnviz.claims.induction import shared_atlas, top_heads
from attnviz.claims.record import Record
from attnviz.claims.setting import Setting, command, silenced_link
from attnviz.engine.hooked.loading import LoadedModel

SOURCE = "arXiv 2605.24059: a circuit of 3–6 heads is causally necessary for induction (51M–1B)"
NECESSARY = 0.5  # the share of the induction benefit a knock-out must take back


class Copies:
    """Token lists of word lists said twice, with the positions of each copy's predictable tokens
    (every token of a copy but its first, whose word nothing foretells)."""

    def __init__(self, model: LoadedModel, pairs: Sequence[tuple[str, str]]) -> None:
        self.ids, self.first, self.second = [], [], []
        for first, whole in pairs:
            ids = runs.ids_of(model, whole)
            n_first = len(runs.ids_of(model, first))
            lead = 1 if n_first and ids[0] == model.tokenizer.bos_token_id else 0
            self.ids.append(ids)
            self.first.append(list(range(lead + 1, n_first)))
            self.second.append(list(range(n_first + 1, len(ids))))

    def losses(self, model: LoadedModel, ablate=()) -> tuple[float, float]:
        """The mean loss of the first copy's and of the second copy's predictable tokens."""
        got = runs.token_losses(model, self.ids, ablate)  # [n - 1] each: token t at t - 1
        first = torch.cat([g[[t - 1 for t in p]] for g, p in zip(got, self.first, strict=True)])
        second = torch.cat([g[[t - 1 for t in p]] for g, p in zip(got, self.second, strict=True)])
        return float(first.mean()), float(second.mean())


def random_sets(heads: list, avoid: set, k: int, n: int, seed: int) -> list[list]:
    """`n` random sets of `k` heads, none in `avoid` (seeded)."""
    pool = [h for h in heads if h not in avoid]
    rng = random.Random(seed)
    return [rng.sample(pool, min(k, len(pool))) for _ in range(n)]


def curve(model: LoadedModel, copies: Copies, ranked: list, s: Setting, progress=None) -> dict:
    """Second-copy losses: the top-k knock-out and the random sets', for k = 1..knock_k."""
    every = [(la, h) for la in range(model.n_layers) for h in range(model.n_heads)]
    top, rand = [], []
    for k in range(1, s.knock_k + 1):
        top.append(copies.losses(model, ranked[:k])[1])
        sets = random_sets(every, set(ranked[:k]), k, s.knock_random, s.seed + k)
        rand.append([copies.losses(model, chosen)[1] for chosen in sets])
        if progress is not None:
            progress(k / s.knock_k)
    return {"top": top, "random": rand}


def judge(first: float, base: float, got: dict) -> tuple[str, str, list[float], list]:
    """(verdict, reason, share of the benefit each top-k knock-out takes back, the k that pass)
    from the first and second copy's losses and the curve."""
    benefit = first - base
    if benefit <= 0:
        return "fail", f"no induction benefit to take back ({benefit:.2f} nats)", [], []
    share = [(t - base) / benefit for t in got["top"]]
    beats = [t > max(r) for t, r in zip(got["top"], got["random"], strict=True)]
    passed = [k + 1 for k in range(len(share)) if beats[k] and share[k] >= NECESSARY]
    losses = f"{benefit:.2f} nats: first copy {first:.2f}, second {base:.2f}"
    if passed:
        k = passed[0]
        why = (
            f"silencing the top {k} induction heads takes back {share[k - 1]:.0%} of the "
            f"induction benefit ({losses}), more than each of {len(got['random'][k - 1])} "
            f"random sets; criterion: some k <= {len(share)} with >= {NECESSARY:.0%} and "
            "above every random set"
        )
        return "pass", why, share, passed
    best = max(range(len(share)), key=share.__getitem__)
    above = [k + 1 for k, b in enumerate(beats) if b] or "none"
    why = (
        f"the top-k knock-out takes back {share[best]:.0%} of the induction benefit at "
        f"most (k = {best + 1}; {losses}); above every random set at k = {above}; "
        f"criterion: some k with >= {NECESSARY:.0%} and above every random set"
    )
    return "fail", why, share, passed


def knockout(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    start = time.perf_counter()
    ranked = top_heads(shared_atlas(model, shared), s.knock_k)
    pairs = texts.said_twice(s.twice_texts, s.twice_words, s.seed + 4)
    copies = Copies(model, pairs)
    first, base = copies.losses(model)
    got = curve(model, copies, ranked, s, (shared or {}).get("progress"))
    v, reason, share, passed = judge(first, base, got)
    return Record(
        claim="knockout",
        statement="A circuit of 3–6 induction heads is causally necessary: silencing the top-k "
        "induction heads hurts the second copy of repeated words far more than random heads.",
        source=SOURCE,
        model=name,
        numbers={
            "loss_first_copy": first,
            "loss_second_copy": base,
            "benefit": first - base,
            "share_top6": share[-1] if share else None,
            "smallest_k": passed[0] if passed else None,
            "heads": " ".join(f"L{la}H{h}" for la, h in ranked),
        },
        verdict=v,
        reason=reason,
        command=command("knockout", name),
        paper={"circuit_heads": "3–6"},
        figure={"k": list(range(1, s.knock_k + 1)), "base": base, "first": first, **got},
        link=silenced_link(name, pairs[0][1], ranked),
        seconds=time.perf_counter() - start,
    )
