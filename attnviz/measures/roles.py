"""Head roles: what every head of a model does, measured over many texts (the head atlas).

Each score is a mean over every counted (text, query row i) pair of all texts, from the weights w
of one head on one text (texts are traced one at a time). A row counts only where it may see at
least two keys: a row that may see one key (a decoder's first token, [BOS] -> [BOS]) puts weight
1 there because the mask forces it, not because the head chose it. A score read at one key
(previous, first, self, duplicate, induction) counts a row only where that key is one it may see.

| score           | rows (besides the rule above)            | value                            |
|-----------------|------------------------------------------|----------------------------------|
| previous_token  | i >= 1                                   | w[i, i-1]                        |
| first_token     | i >= 1                                   | w[i, 0]                          |
| self            | every row                                | w[i, i]                          |
| duplicate_token | token i occurred before at j, j + 1 < i  | w[i, j]                          |
| induction       | the same rows                            | w[i, j + 1]                      |
| entropy         | every row                                | H(w[i]) / ln(keys row i may see) |
| special         | every row                                | weight on special tokens past 0  |
| punctuation     | every row                                | weight on punctuation tokens     |
| distance        | every row                                | sum_j w[i, j] |i - j|            |

j is the earlier occurrence of token i whose preceding tokens match i's for the most tokens (up
to 8; the latest among equals): on text said twice (the probe set's "repeated" texts) it is i's
counterpart in the first copy, so induction there is the weight on the token that came next last
time, Olsson et al.'s (2022) score on repeated sequences; a word said once before matches on
itself alone, as in "the cat ... the".

A score's example is its largest row value over all texts; for entropy only among rows that see
at least BROAD_KEYS (8) keys, or in a text where no row sees that many, those that see the most
(a causal model's row 1 weighs its 2 keys 0.5/0.5: relative entropy 1, broad only trivially).

A head passes every role whose score reaches its threshold (THRESHOLDS; "broad" is a high
entropy): `roles` lists them all (a sink can also be an induction head), `role` is the first in
ROLE_ORDER (the rarest kind first, for a colour), "mixed" where none is passed. Tokens are
compared by their string (one string per id in a model's vocabulary). Cross-attention has no
positions in common with its queries: only first_token, entropy, special and punctuation are
measured there (the rest are NaN).

Pooling is by sums and counts (role_sums, one row per text and head; merge_sums), so atlases of
parts of a corpus add up exactly to the atlas of the whole, and a corpus atlas can be sliced by
text (text_scores).
"""

from __future__ import annotations

import math
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from attnviz.engine.trace import Trace
from attnviz.measures.role_scores import EXTRA, SCORES, Acc, layer_sums, repeats

# A head passes a role when the role's score reaches this.
THRESHOLDS = {
    "previous_token": 0.4,
    "first_token": 0.5,
    "self": 0.4,
    "duplicate_token": 0.3,
    "induction": 0.3,
    "special": 0.5,
    "punctuation": 0.5,
    "broad": 0.9,  # entropy
}
# The primary role (a head's colour) is the first it passes here: the rarer, more specific kind
# first; first token last but one (135 of SmolLM2's 270 heads pass it, its induction heads too).
ROLE_ORDER = (
    "induction", "duplicate_token", "previous_token", "self", "punctuation", "special",
    "first_token", "broad",
)  # fmt: skip
ROLES = (*ROLE_ORDER, "mixed")
ROLE_SCORE = {role: ("entropy" if role == "broad" else role) for role in THRESHOLDS}
PARTS = ("encoder", "decoder", "cross")  # the order of a frame's rows
PROBES = Path(__file__).resolve().parent.parent / "assets" / "probes"
MAX_TEXTS = 64  # texts one atlas measures in one process (attnviz.atlas_corpus takes more)
_SPECIAL_LABELS = ("[CLS]", "[SEP]")  # trace.special labels counted (padding is masked anyway)
_PREFIXES = ("##", "Ġ", "▁")  # word-piece markers stripped before the punctuation test
_ALL = (*SCORES, *EXTRA)
KEYS = ("part", "layer", "head")
# role_sums' columns: the text, the head, then per score its sum, count, top value, row and key.
# Why each head looks where it looks (measures/qk_sources.py): its top-weight logits summed by
# source over every query row; qk_n counts the texts measured (0 where the atlas had no model).
QK_SOURCES = ("position", "token", "heads", "mlp", "bias")
QK_COLUMNS = tuple(f"qk_{s}" for s in QK_SOURCES)
SUM_COLUMNS = (
    ("text", *KEYS, "n_repeats")
    + tuple(f"{s}_{what}" for s in _ALL for what in ("sum", "n", "top", "row", "key"))
    + tuple(f"{c}_sum" for c in QK_COLUMNS)
    + ("qk_n",)
)


def probe_texts(lang: str = "en") -> dict[str, list[str]]:
    """The built-in probe set of a language ("en", "zh" or "both"): {"natural": sentences,
    "repeated": random words repeated (for induction), "passage": one longer text}."""
    if lang == "both":
        en, zh = probe_texts("en"), probe_texts("zh")
        return {kind: en[kind] + zh[kind] for kind in en}
    if lang not in ("en", "zh"):
        raise ValueError(f"lang={lang!r}: the probe set speaks 'en', 'zh' or 'both'")
    with open(PROBES / f"{lang}.toml", "rb") as f:
        raw = tomllib.load(f)
    return {kind: list(raw[kind]) for kind in ("natural", "repeated", "passage")}


def probe_list(lang: str = "en") -> list[str]:
    """The probe set as one list of texts, in the order natural, repeated, passage."""
    return [text for texts in probe_texts(lang).values() for text in texts]


def is_punctuation(token: str) -> bool:
    """A token made only of punctuation (after its word-piece marker): "," "。" "##." "Ġ!"."""
    for prefix in _PREFIXES:
        if token.startswith(prefix) and len(token) > len(prefix):
            token = token[len(prefix) :]
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def _specials(trace: Trace, n_k: int) -> list[int]:
    """Key positions of special tokens other than the first ([SEP], an end token)."""
    found = {p for label in _SPECIAL_LABELS for p in trace.special.get(label, ())}
    return sorted(p for p in found if 0 < p < n_k)


def _puncts(trace: Trace) -> list[int]:
    return [j for j, token in enumerate(trace.key_tokens) if is_punctuation(token)]


def _part_name(trace: Trace) -> str:
    part = trace.meta.get("part")
    if part:
        return part
    config = trace.meta.get("config")
    return "decoder" if getattr(config, "causal", False) else "encoder"


def _parts(trace: Trace) -> list[Trace]:
    return [trace, *trace.parts.values()]


def role_sums(
    traces: Iterable[Trace],
    text_ids: Sequence[int] | None = None,
    progress: Callable[[int, int], object] | None = None,
    total: int | None = None,
    sources: Callable[[Trace], dict] | None = None,
) -> pd.DataFrame:
    """Every head's sums on every text: one row per (text, part, layer, head) with SUM_COLUMNS
    (per score its sum and count of row values, and the largest with its row and key), folded in
    one trace at a time, so a generator holds one trace at a time. `text_ids`: each trace's text
    number (default 0, 1, ...); `progress(done, total)` after each trace. merge_sums pools them.
    `sources(trace)`: {(part, layer): [heads, 5]} the qk_* sums (qk_sources.source_sums with
    the model bound); None leaves them 0 with qk_n 0."""
    if total is None and isinstance(traces, Sequence):
        total = len(traces)
    cols: dict[str, list] = {name: [] for name in SUM_COLUMNS}
    for t, trace in enumerate(traces):
        text = t if text_ids is None else int(text_ids[t])
        why = {} if sources is None else sources(trace)
        for sub in _parts(trace):
            part, cross = _part_name(sub), sub.is_cross
            pairs = [] if cross else repeats(sub.tokens)
            keysets = {"special": _specials(sub, len(sub.key_tokens)), "punctuation": _puncts(sub)}
            for li, layer in enumerate(sub.layers):
                acc = layer_sums(layer, cross, pairs, keysets)
                h = layer.n_heads
                for name, value in (("text", text), ("part", part), ("layer", li),
                                    ("n_repeats", len(pairs))):  # fmt: skip
                    cols[name].append(np.full(h, value, dtype=object if name == "part" else None))
                cols["head"].append(np.arange(h))
                for s in _ALL:
                    a = acc.get(s) or Acc.empty(h)
                    cols[f"{s}_sum"].append(a.total.numpy())
                    cols[f"{s}_n"].append(np.full(h, a.n))
                    for what, value in (("top", a.top), ("row", a.row), ("key", a.key)):
                        cols[f"{s}_{what}"].append(value.numpy())
                found = why.get((part, li))
                for c, col in enumerate(QK_COLUMNS):
                    cols[f"{col}_sum"].append(np.zeros(h) if found is None else found[:, c])
                cols["qk_n"].append(np.full(h, 0 if found is None else 1))
        if progress is not None:
            progress(t + 1, total if total is not None else t + 1)
    return _typed(cols)


def _typed(cols: dict[str, list]) -> pd.DataFrame:
    """role_sums' columns as one frame with fixed dtypes (so that parts written by different
    processes concatenate and compare exactly)."""
    out = {}
    for name in SUM_COLUMNS:
        values = np.concatenate(cols[name]) if cols[name] else np.array([])
        if name == "part":
            out[name] = pd.array(values, dtype="str")
        elif name.endswith(("_sum", "_top")):
            out[name] = values.astype(np.float64)
        else:
            out[name] = values.astype(np.int64)
    return pd.DataFrame(out, columns=list(SUM_COLUMNS))


def roles_from_traces(
    traces: Iterable[Trace],
    progress: Callable[[int, int], object] | None = None,
    total: int | None = None,
) -> pd.DataFrame:
    """head_roles from traces (one per text; an encoder-decoder's with its parts):
    merge_sums(role_sums(traces))."""
    return merge_sums(role_sums(traces, progress=progress, total=total))


def sorted_sums(sums: pd.DataFrame) -> pd.DataFrame:
    """Rows by text, then part (PARTS' order), layer and head: one order for every pooling."""
    rank = sums["part"].map({p: i for i, p in enumerate(PARTS)}).fillna(len(PARTS))
    order = np.lexsort((sums["head"], sums["layer"], rank, sums["text"]))
    return sums.iloc[order].reset_index(drop=True)


def merge_sums(sums: pd.DataFrame) -> pd.DataFrame:
    """head_roles' frame from role_sums' rows (of one run, or of many parts concatenated): per
    (part, layer, head) the sums and counts added over texts, each score their ratio, the roles,
    and the example (the largest row value over all texts; the lowest text wins a tie)."""
    missing = [c for c in SUM_COLUMNS if c not in sums.columns]
    if missing:
        raise ValueError(f"these are not head-role sums: columns {missing[:4]} are missing")
    if sums.empty:
        raise ValueError("no text was measured: the atlas is empty")
    sums = sorted_sums(sums)
    groups = sums.groupby(list(KEYS), sort=False)
    added = [f"{s}_{what}" for s in _ALL for what in ("sum", "n")] + ["n_repeats", "qk_n"]
    added += [f"{c}_sum" for c in QK_COLUMNS]
    totals = groups[added].sum()  # [head rows]
    best = {s: sums.loc[groups[f"{s}_top"].idxmax().to_numpy()] for s in _ALL}
    heads = totals.index.to_frame(index=False)
    rank = heads["part"].map({p: i for i, p in enumerate(PARTS)}).fillna(len(PARTS))
    order = np.lexsort((heads["head"], heads["layer"], rank))
    rows = []
    for at in order:
        part, layer, head = totals.index[at]
        row = {"part": part, "layer": int(layer), "head": int(head)}
        for s in _ALL:
            n = totals[f"{s}_n"].iat[at]
            row[s] = float(totals[f"{s}_sum"].iat[at] / n) if n else float("nan")
        passed = roles_passed(row)
        row["role"], row["roles"] = passed[0], ",".join(passed)
        row["n_repeats"] = int(totals["n_repeats"].iat[at])
        row |= _qk_shares(totals, at)
        shown = _shown_score(row)
        ex = best[shown].iloc[at]
        found = ex[f"{shown}_top"] > float("-inf")
        row["example_score"] = shown
        for name, col in (("example_text", "text"), ("example_row", f"{shown}_row"),
                          ("example_key", f"{shown}_key")):  # fmt: skip
            row[name] = int(ex[col]) if found else -1
        rows.append(row)
    columns = [*KEYS, *SCORES, *EXTRA, "role", "roles", "n_repeats"]
    columns += ["example_score", "example_text", "example_row", "example_key", *QK_COLUMNS]
    return pd.DataFrame(rows, columns=columns)


def _qk_shares(totals: pd.DataFrame, at: int) -> dict[str, float]:
    """A head's qk_* columns: each source's summed logit over the sources' summed sizes (signed;
    their absolute values add up to 1), NaN where no text was measured."""
    sums = np.array([totals[f"{c}_sum"].iat[at] for c in QK_COLUMNS], dtype=np.float64)
    size = np.abs(sums).sum()
    if not totals["qk_n"].iat[at] or size == 0:
        return dict.fromkeys(QK_COLUMNS, float("nan"))
    return {c: float(v / size) for c, v in zip(QK_COLUMNS, sums, strict=True)}


def roles_passed(scores: dict[str, float]) -> tuple[str, ...]:
    """Every role whose score reaches its threshold, in ROLE_ORDER; ("mixed",) for none."""
    passed = tuple(
        role
        for role in ROLE_ORDER
        if not math.isnan(value := scores.get(ROLE_SCORE[role], float("nan")))
        and value >= THRESHOLDS[role]
    )
    return passed or ("mixed",)


def _shown_score(row: dict) -> str:
    """The score a head's example illustrates: its role's, or for a mixed head its strongest."""
    if row["role"] != "mixed":
        return ROLE_SCORE[row["role"]]
    ratios = {
        ROLE_SCORE[r]: row[ROLE_SCORE[r]] / th
        for r, th in THRESHOLDS.items()
        if not math.isnan(row[ROLE_SCORE[r]])
    }
    return max(ratios, key=ratios.get) if ratios else "entropy"


def _one_head(sums: pd.DataFrame, part: str, layer: int, head: int) -> pd.DataFrame:
    rows = sums[(sums["part"] == part) & (sums["layer"] == layer) & (sums["head"] == head)]
    return rows.sort_values("text", kind="stable")


def text_scores(sums: pd.DataFrame, part: str, layer: int, head: int, score: str) -> pd.DataFrame:
    """One head's `score` text by text, strongest first: the corpus atlas sliced by text.
    Columns text, score (that text's mean), rows (how many counted), top, row, key (its largest
    row)."""
    if score not in _ALL:
        raise ValueError(f"score={score!r} must be one of {', '.join(_ALL)}")
    rows = _one_head(sums, part, layer, head)
    rows = rows[rows[f"{score}_n"] > 0]
    out = pd.DataFrame({
        "text": rows["text"].to_numpy(),
        "score": (rows[f"{score}_sum"] / rows[f"{score}_n"]).to_numpy(),
        "rows": rows[f"{score}_n"].to_numpy(),
        "top": rows[f"{score}_top"].to_numpy(),
        "row": rows[f"{score}_row"].to_numpy(),
        "key": rows[f"{score}_key"].to_numpy(),
    })  # fmt: skip
    return out.sort_values(["score", "text"], ascending=[False, True], kind="stable")


def best_rows(sums: pd.DataFrame, part: str, layer: int, head: int) -> pd.DataFrame:
    """Where one head shows each score most over all texts: index score, columns value, text,
    row, key (the example of each role it passes); scores it never measured are left out."""
    rows = _one_head(sums, part, layer, head)
    found = {}
    for s in _ALL:
        if rows.empty or not (rows[f"{s}_top"] > float("-inf")).any():
            continue
        at = rows[f"{s}_top"].to_numpy().argmax()  # the first (lowest text) of equals
        r = rows.iloc[at]
        found[s] = (float(r[f"{s}_top"]), int(r["text"]), int(r[f"{s}_row"]), int(r[f"{s}_key"]))
    return pd.DataFrame.from_dict(found, orient="index", columns=["value", "text", "row", "key"])


def _tracer(model: object) -> Callable[[Sequence[str]], Iterable[Trace]]:
    """texts -> traces, lazily, one text at a time, for a loaded model, a StackConfig or a
    function text -> Trace."""
    from attnviz.engine.config import StackConfig

    if isinstance(model, StackConfig):
        from attnviz.engine.stack import trace_text

        return lambda texts: (trace_text(text, model) for text in texts)
    if type(model).__name__ == "LoadedModel":
        from attnviz.engine.hooked import trace_model

        # One forward a text: batching the probe set (trace_each) padded the short sentences to
        # the passage's length and was no faster (bench/atlas.py).
        return lambda texts: (trace_model(model, text) for text in texts)
    if callable(model):
        return lambda texts: (_checked_trace(model(text)) for text in texts)
    raise TypeError(
        f"model must come from load_model(), be a StackConfig or a function text -> Trace, "
        f"not {type(model).__name__}"
    )


def _checked_trace(trace: object) -> Trace:
    if not isinstance(trace, Trace):
        raise TypeError(f"the model function must return a Trace, not {type(trace).__name__}")
    return trace


def checked_texts(texts: object) -> list[str]:
    """The texts of an atlas: a list of 1..MAX_TEXTS non-blank strings."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a list of texts, not {type(texts).__name__}")
    texts = list(texts)
    if not texts or len(texts) > MAX_TEXTS:
        raise ValueError(f"texts holds {len(texts)} texts: give 1 to {MAX_TEXTS}")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts[{i}] must be a non-blank string")
    return texts


def head_role_sums(
    model: object,
    texts: Iterable[str] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> pd.DataFrame:
    """role_sums of `model` on `texts` (head_roles' arguments): the atlas before merging, which
    merge_sums turns into head_roles' frame and text_scores slices by text."""
    texts = checked_texts(probe_list("en") if texts is None else texts)
    sources = None
    if type(model).__name__ == "LoadedModel":
        from attnviz.measures.qk_sources import source_sums

        sources = partial(source_sums, model)
    return role_sums(_tracer(model)(texts), progress=progress, total=len(texts), sources=sources)


def head_roles(
    model: object,
    texts: Iterable[str] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> pd.DataFrame:
    """What every head does: one row per (part, layer, head) with the scores of this module's
    table pooled over all `texts` (default: the English probe set, `probe_list("en")`), every
    role it passes (`roles`, comma-separated), its primary `role`, and where it shows that role
    most (`example_text`, `example_row`, `example_key`: the text's index, the query row and the
    key). `model`: load_model()'s model (encoder, decoder or encoder-decoder: each part's blocks
    get rows), a StackConfig (the toy stack) or a function text -> Trace. Each text is traced
    alone, through the same checks and limits as trace_model; `progress(done, total)` is called
    after each text. For a loaded model, qk_position, qk_token, qk_heads, qk_mlp and qk_bias say
    why each head looks where it looks: its top-weight logits (each query row with the key it
    weighs most) split by what the query and key carry (measures/qk_sources.py: position
    embeddings and RoPE's rotation, the tokens' embeddings, earlier heads, MLPs, biases), summed
    over every row and text, each over the five sums' total size (signed; NaN for a StackConfig
    or a function, which give no model to split)."""
    return merge_sums(head_role_sums(model, texts, progress))
