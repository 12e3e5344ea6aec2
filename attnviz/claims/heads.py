"""How many heads carry 80 % of a task's effect (arXiv 2605.08853: grouped-query attention
concentrates circuits relative to multi-head attention: fewer heads carry a task).

The task: induction on random words said twice (the knock-out's texts, attnviz.claims.knockout).
Its effect is the induction benefit B = loss(first copy) - loss(second copy): how much better the
second copy is predicted, from the first. With a set S of heads silenced (the what-if `ablate`:
their z zeroed before W_O, on both copies) the benefit left is B(S); S carries the share
1 - B(S) / B of the task. Every head is silenced alone and ranked by its share (one forward a
head); then the top 1, 2, ... heads are silenced together, each set measured as a whole (not
the sum of single shares), until a set carries >= 80 %. That k is an upper bound on the fewest
heads that do (finding the true fewest is a search over every subset).

The paper compares GQA with MHA. attnviz ships no MHA decoder: SmolLM2-135M is GQA (9 query
heads on 3 K/V heads), Gemma 3 270M MQA (4 on 1), the character model GQA (8 on 2), and MiniLM,
the one MHA model, is an encoder that cannot predict a second copy from the first. The records
give each model's count and share, and the verdict is "not comparable"."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from attnviz.claims import knockout, runs, texts
from attnviz.claims.record import Record
from attnviz.claims.setting import Setting, command, silenced_link
from attnviz.engine.hooked.loading import LoadedModel

SOURCE = "arXiv 2605.08853: GQA concentrates circuits relative to MHA (fewer heads carry a task)"
SHARE = 0.8  # the share of the task's effect the heads must carry
Head = tuple[int, int]


def carried(benefit: Callable[[Sequence[Head]], float], full: float, heads: Sequence[Head]):
    """The share of the full benefit that silencing `heads` together takes away."""
    return 1.0 - benefit(heads) / full


def needed(benefit: Callable[[Sequence[Head]], float], every: Sequence[Head], most: int,
           progress: Callable[[float], object] | None = None) -> dict:  # fmt: skip
    """Rank `every` head by the share it carries alone, then silence the top k together for
    k = 1 .. `most` until a set carries SHARE. `benefit(heads)` is the task's benefit with
    `heads` silenced. Returns the ranking, the single and joint shares and k (None: not within
    `most`)."""
    full = benefit(())
    if full <= 0:
        return {"full": full, "ranked": [], "single": [], "joint": [], "k": None}
    single = {}
    for i, h in enumerate(every):
        single[h] = carried(benefit, full, [h])
        if progress is not None:
            progress(0.8 * (i + 1) / len(every))  # the single heads: most of the forwards
    ranked = sorted(every, key=lambda h: -single[h])
    joint, k = [], None
    for n in range(1, min(most, len(ranked)) + 1):
        joint.append(carried(benefit, full, ranked[:n]))
        if progress is not None:
            progress(0.8 + 0.2 * n / min(most, len(ranked)))
        if joint[-1] >= SHARE:
            k = n
            break
    return {"full": full, "ranked": ranked, "single": [single[h] for h in ranked],
            "joint": joint, "k": k}  # fmt: skip


def attention(model: LoadedModel) -> tuple[str, int, int]:
    """('MHA', 'GQA' or 'MQA', query heads, K/V heads) of a layer of `model`."""
    kv = model.n_kv_heads or model.n_heads
    return ("MHA" if kv == model.n_heads else ("MQA" if kv == 1 else "GQA")), model.n_heads, kv


def said(kind: tuple[str, int, int]) -> str:
    name, q, kv = kind
    return f"{name} ({q} query heads on {kv} K/V head{'s' if kv > 1 else ''})"


def _benefit(model: LoadedModel, copies: knockout.Copies) -> Callable[[Sequence[Head]], float]:
    def benefit(heads: Sequence[Head]) -> float:
        first, second = copies.losses(model, heads)
        return first - second

    return benefit


def measure(model: LoadedModel, copies: knockout.Copies, s: Setting, progress=None) -> dict:
    """`needed` for the induction benefit on `copies`, every head of `model` a candidate."""
    every = [(la, h) for la in range(model.n_layers) for h in range(model.n_heads)]
    return needed(_benefit(model, copies), every, s.heads_most, progress)


def _reason(got: dict, total: int, kind: str, most: int) -> str:
    if got["full"] <= 0:
        said = f"no induction benefit to carry ({got['full']:.2f} nats): no head does the task"
    elif got["k"] is None:
        said = (f"the top {most} heads silenced together carry {got['joint'][-1]:.0%} of the "
                f"induction benefit ({got['full']:.2f} nats), under {SHARE:.0%}")  # fmt: skip
    else:
        said = (f"{got['k']} of {total} heads ({got['k'] / total:.1%}) carry "
                f"{got['joint'][-1]:.0%} of the induction benefit ({got['full']:.2f} nats) "
                f"silenced together")  # fmt: skip
    return (
        f"{said}; {kind}. Not comparable with the paper's GQA-vs-MHA claim: attnviz ships no "
        "MHA decoder (SmolLM2-135M and the character model are GQA, Gemma 3 270M is MQA; "
        "MiniLM, the one MHA model, is an encoder and cannot do this left-to-right task)"
    )


def fitting(model: LoadedModel, s: Setting) -> list[tuple[str, str]]:
    """The knock-out's texts of words said twice, with fewer words (5 at a time) where a text
    would not fit the model's context (the character model reads 256 characters)."""
    for n in range(s.twice_words, 0, -5):
        pairs = texts.said_twice(s.twice_texts, n, s.seed + 4)
        if all(len(runs.ids_of(model, whole)) <= model.max_length for _, whole in pairs):
            return pairs
    raise ValueError(f"no text of words said twice fits {model.max_length} tokens")


def heads_needed(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    start = time.perf_counter()
    pairs = fitting(model, s)
    got = measure(model, knockout.Copies(model, pairs), s, (shared or {}).get("progress"))
    total = model.n_layers * model.n_heads
    kind = attention(model)
    k = got["k"]
    shown = got["ranked"][: k or len(got["joint"])]
    return Record(
        claim="heads_needed",
        statement="Grouped-query attention concentrates a task's circuit: fewer heads carry "
        f"{SHARE:.0%} of its effect than in multi-head attention.",
        source=SOURCE,
        model=name,
        numbers={
            "heads_needed": k,
            "share_of_heads": None if k is None else k / total,
            "heads": total,
            "carried": got["joint"][-1] if got["joint"] else None,
            "benefit": got["full"],
            "attention": kind[0],
            "query_heads": kind[1],
            "kv_heads": kind[2],
            "words": len(pairs[0][0].split()),
            "needed": " ".join(f"L{la}H{h}" for la, h in shown),
        },
        verdict="not comparable",
        reason=_reason(got, total, said(kind), s.heads_most),
        command=command("heads_needed", name),
        paper={"claim": "GQA needs fewer heads than MHA for the same task"},
        figure={
            "single": got["single"][: s.heads_most],
            "joint": got["joint"],
            "heads": [f"L{la}H{h}" for la, h in got["ranked"][: s.heads_most]],
            "total": total,
            "k": k,
            "share": SHARE,
        },  # fmt: skip
        link=silenced_link(name, pairs[0][1], shown),
        seconds=time.perf_counter() - start,
    )
