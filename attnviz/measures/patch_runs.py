"""The runs activation patching is made of: a clean and a corrupt prompt of the same length
through a decoder, the metric logit(answer) − logit(foil) after the last token, and forward
hooks that read or replace two kinds of activation in this thread's forwards only:

- a head's z before W_O: the input of the block's output projection (o_proj, GPT-2's c_proj),
  [batch, n, head * d_head], head h in columns h·d_head … (h+1)·d_head. The attention function
  builds that input from z exactly where the what-if silencing zeroes a head
  (engine/hooked/intercept.py `_silence`), so patching and silencing act at the same point;
- the residual stream entering a decoder layer (its hidden_states), [batch, n, d_model].

Used by measures/patching.py (exact) and measures/attribution.py (AtP). No streamlit here.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from attnviz.engine.hooked.families import DECODER
from attnviz.engine.hooked.hooks import forward_pre_hook
from attnviz.engine.hooked.intercept import Call, Recording
from attnviz.engine.hooked.labels import piece_text, token_labels
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.preparing import prepare
from attnviz.engine.hooked.readout import decoder_layers, needs_head
from attnviz.engine.request import Knobs, TraceRequest
from attnviz.measures.compare import aligned


@dataclass(eq=False)
class PatchSetup:
    """A clean and a corrupt prompt, tokenized and run once each: their ids [1, n], tokens, the
    answer and foil ids and the metric logit(answer) − logit(foil) of each run."""

    model: LoadedModel
    clean_ids: torch.Tensor  # [1, n]
    corrupt_ids: torch.Tensor  # [1, n]
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    answer: int
    foil: int
    clean: float  # the metric on the clean run
    corrupt: float  # the metric on the corrupt run
    differ: list[int] = field(default_factory=list)  # positions whose tokens differ

    @property
    def n(self) -> int:
        return self.clean_ids.shape[1]

    @property
    def gap(self) -> float:
        return self.clean - self.corrupt

    def attrs(self) -> dict[str, Any]:
        """What a result frame says about its runs (its `attrs`)."""
        tok = self.model.tokenizer
        return {
            "answer": piece_text(tok, self.answer),
            "foil": piece_text(tok, self.foil),
            "answer_id": self.answer,
            "foil_id": self.foil,
            "clean": self.clean,
            "corrupt": self.corrupt,
            "clean_tokens": list(self.clean_tokens),
            "corrupt_tokens": list(self.corrupt_tokens),
            "differ": list(self.differ),
        }


def decoder_blocks(model: LoadedModel) -> list[Any]:
    """The decoder's self-attention blocks, by layer."""
    return sorted((b for b in model.blocks if b.part == DECODER), key=lambda b: b.layer)


def check_decoder(model: LoadedModel) -> None:
    """Refuse a model that has no next-token head (an encoder) or is not decoder-only."""
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), not {type(model).__name__}")
    needs_head(model)
    if model.kind != "decoder":
        raise ValueError(
            f"{model.name!r} is an {model.kind}: patching runs decoder-only models (GPT-2, "
            "Llama, SmolLM2, Qwen, Gemma 3)"
        )


def token_ids(model: LoadedModel, text: str) -> torch.Tensor:
    """`text` tokenized as a trace tokenizes it (checked against the budget). [1, n]"""
    if not isinstance(text, str):
        raise TypeError(f"clean and corrupt must be texts, not {type(text).__name__}")
    prepared = prepare(model, TraceRequest.of(model.key, text))
    if prepared.n_input > prepared.n_tokens:
        raise ValueError(f"{text[:40]!r}… is over this model's {prepared.limit} tokens: shorten it")
    return prepared.enc["input_ids"]


def _span(tokens: list[str], lo: int, hi: int) -> str:
    return f"{lo}–{hi - 1} {tokens[lo:hi]}" if hi > lo else f"(nothing at {lo})"


def check_lengths(clean: list[str], corrupt: list[str]) -> None:
    """Clean and corrupt must have as many tokens; else a message with both lists and where they
    differ (the runs Compare's alignment leaves unmatched)."""
    if len(clean) == len(corrupt):
        return
    pairs = aligned(clean, corrupt) + [(len(clean), len(corrupt))]
    gaps, (i0, j0) = [], (0, 0)
    for i, j in pairs:
        if i > i0 or j > j0:
            gaps.append(f"clean {_span(clean, i0, i)} / corrupt {_span(corrupt, j0, j)}")
        i0, j0 = i + 1, j + 1
    raise ValueError(
        f"clean and corrupt must have the same number of tokens to patch position by position: "
        f"clean has {len(clean)} {clean}, corrupt has {len(corrupt)} {corrupt}; they differ at "
        + "; ".join(gaps)
        + ". Replace a word with one of as many tokens."
    )


def rows_input(ids: torch.Tensor, rows: int, model: LoadedModel) -> dict[str, Any]:
    """The keyword arguments of a forward of `rows` copies of ids [1, n], logits of the last
    position only."""
    dev = torch.device(model.device)
    batch = ids.to(dev).expand(rows, -1)  # [rows, n]
    return {"input_ids": batch, "attention_mask": torch.ones_like(batch), "logits_to_keep": 1}


def metric_of(logits: torch.Tensor, answer: int, foil: int) -> torch.Tensor:
    """logit(answer) − logit(foil) of each row. [rows, vocab] -> [rows]"""
    return logits[:, answer].float() - logits[:, foil].float()


@dataclass
class Caught:
    """What a run read: z before W_O by layer [n, head * d_head] and the residual entering each
    layer [n, d_model] (batch row 0; graph tensors when the run keeps a graph), and the
    attention record (q, k, v, weights, mask) when asked for."""

    z: dict[int, torch.Tensor] = field(default_factory=dict)
    resid: dict[int, torch.Tensor] = field(default_factory=dict)
    record: Recording | None = None
    logits: torch.Tensor | None = None  # [vocab] after the last token


def _hidden(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextmanager
def hooked(model: LoadedModel, read: Caught | None = None, write: dict | None = None):
    """Forward pre-hooks, for this thread's forwards only, on each decoder block's W_O (its input
    is concat(z)) and each decoder layer (its input is the residual stream): `read` keeps row 0
    of each; `write` replaces parts of each, {("z" | "resid", layer): fn(x) -> x}."""
    me = threading.get_ident()
    write = write or {}

    def make(kind: str, layer: int):
        def hook(module, args, kwargs):
            if threading.get_ident() != me:
                return None
            x = _hidden(args, kwargs)  # [batch, n, width]
            fn = write.get((kind, layer))
            if fn is not None:
                x = fn(x)
                args, kwargs = _replaced(args, kwargs, x)
            if read is not None:  # a graph's tensor whole (its row 0 would be a new node)
                (read.z if kind == "z" else read.resid)[layer] = x if x.requires_grad else x[0]
            return (args, kwargs) if fn is not None else None

        return hook

    handles = [forward_pre_hook(b.w_o, make("z", b.layer)) for b in decoder_blocks(model)]
    handles += [
        forward_pre_hook(layer, make("resid", i)) for i, layer in enumerate(decoder_layers(model))
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _replaced(args: tuple, kwargs: dict, x: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (x, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": x}


def run(model: LoadedModel, ids: torch.Tensor, record: bool = False) -> Caught:
    """One forward of ids [1, n], no graph: every head's z and residual input read."""
    caught = Caught(record=Recording(blocks=_blocks(model)) if record else None)
    with torch.inference_mode(), hooked(model, read=caught):
        out = model.model(**rows_input(ids, 1, model), attnviz_call=Call(Knobs(), caught.record))
    caught.logits = out.logits[0, -1].float()
    if caught.record is not None:  # AtP* reads q, k, v, the weights and the mask, not the scores
        for rec in caught.record.layers.values():
            rec.scores = None
    return caught


def _blocks(model: LoadedModel) -> dict[int, int]:
    return {id(b.attention): i for i, b in enumerate(model.blocks)}


def setup(
    model: LoadedModel, clean: str, corrupt: str, answer=None, foil=None
) -> tuple[PatchSetup, Caught, Caught]:
    """The two prompts checked, tokenized and run once each; answer and foil resolved (default:
    the clean run's top token, and the corrupt run's top token other than the answer)."""
    check_decoder(model)
    ids_a, ids_b = token_ids(model, clean), token_ids(model, corrupt)
    tok_a = token_labels(model.tokenizer, ids_a[0].tolist())
    tok_b = token_labels(model.tokenizer, ids_b[0].tolist())
    check_lengths(tok_a, tok_b)
    run_a, run_b = run(model, ids_a, record=True), run(model, ids_b, record=True)
    bare = PatchSetup(model, ids_a, ids_b, tok_a, tok_b, -1, -1, 0.0, 0.0,
                      [i for i in range(ids_a.shape[1]) if ids_a[0, i] != ids_b[0, i]])  # fmt: skip
    found = with_tokens(bare, (run_a, run_b), answer, foil)
    return found, run_a, run_b


def with_tokens(s: PatchSetup, runs: tuple[Caught, Caught], answer=None, foil=None) -> PatchSetup:
    """The setup with its answer and foil resolved and each run's metric (default answer: the
    clean run's top token; default foil: the corrupt run's top token other than the answer)."""
    from dataclasses import replace

    model, (run_a, run_b) = s.model, runs
    answer_id = _token(model, answer, run_a.logits, "answer")
    if foil is None:
        ranked = run_b.logits.argsort(descending=True)[:2].tolist()
        foil_id = ranked[1] if ranked[0] == answer_id else ranked[0]
    else:
        foil_id = _token(model, foil, run_b.logits, "foil")
    if foil_id == answer_id:
        same = piece_text(model.tokenizer, foil_id)
        raise ValueError(
            f"answer and foil are the same token ({same!r}): the metric logit(answer) − "
            "logit(foil) would be 0; pick another foil"
        )
    clean = float(metric_of(run_a.logits[None], answer_id, foil_id)[0])
    corrupt = float(metric_of(run_b.logits[None], answer_id, foil_id)[0])
    return replace(s, answer=answer_id, foil=foil_id, clean=clean, corrupt=corrupt)


def _token(model: LoadedModel, token, logits: torch.Tensor, name: str) -> int:
    """An answer or foil as one token id: an id, one token's text, or None (the top token)."""
    from attnviz.measures.lens import one_token

    return one_token(model, logits, token, name)


def effect(metric: torch.Tensor | float, s: PatchSetup):
    """(metric − corrupt) / (clean − corrupt); NaN when the runs do not differ."""
    gap = s.gap
    if abs(gap) < 1e-9:
        return metric * float("nan")
    return (metric - s.corrupt) / gap
