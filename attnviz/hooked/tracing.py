"""Tracing: run a loaded model once with the recorder and knobs, and build one Trace per input."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

from attnviz.hooked.families import POST_LN, SPECIAL_ROLES
from attnviz.hooked.intercept import Knobs, Recording
from attnviz.hooked.loading import LoadedModel
from attnviz.trace import LayerTrace, Trace


def _check_knobs(
    model: LoadedModel,
    temperature: float,
    ablate: Iterable[tuple[int, int]],
    max_length: int | None,
) -> tuple[frozenset[tuple[int, int]], int]:
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), got {type(model).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature={temperature} must be a positive number (1 = unchanged)")
    heads = frozenset((int(layer), int(head)) for layer, head in ablate)
    for layer, head in sorted(heads):
        if not (0 <= layer < model.n_layers and 0 <= head < model.n_heads):
            raise ValueError(
                f"ablate=({layer}, {head}) is outside the model: layers 0..{model.n_layers - 1}, "
                f"heads 0..{model.n_heads - 1}"
            )
    limit = model.max_length if max_length is None else int(max_length)
    if not 4 <= limit <= model.max_length:
        raise ValueError(f"max_length={max_length} must be between 4 and {model.max_length}")
    return heads, limit


def _encode(
    model: LoadedModel, texts: list[str], pairs: list[str] | None, limit: int
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Tokenized batch (truncated to `limit`, padded) and each item's untruncated length."""
    tok = model.call_tokenizer
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


def _special(model: LoadedModel, ids: list[int]) -> dict[str, list[int]]:
    found = {}
    for label, attr in SPECIAL_ROLES.items():
        token_id = getattr(model.tokenizer, attr, None)
        found[label] = [i for i, t in enumerate(ids) if token_id is not None and t == token_id]
    return found


def trace_batch(
    model: LoadedModel,
    texts: Sequence[str],
    text_pairs: Sequence[str | None] | None = None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    mask_tokens: Iterable[int] = (),
    max_length: int | None = None,
) -> list[Trace]:
    """`trace_model` for several inputs run as one padded batch: one Trace each, padded to the
    longest (pad positions are in `special["[PAD]"]` and masked: they get weight exactly 0)."""
    heads, limit = _check_knobs(model, temperature, ablate, max_length)
    texts = list(texts)
    if not texts:
        raise ValueError("texts is empty: give at least one sentence")
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"text {text!r} is empty: type a sentence to trace")
    pairs = None
    if text_pairs is not None and any(p and p.strip() for p in text_pairs):
        if len(text_pairs) != len(texts) or not all(p and p.strip() for p in text_pairs):
            raise ValueError("text_pairs needs one non-empty second sentence per text")
        pairs = list(text_pairs)
    enc, n_input = _encode(model, texts, pairs, limit)
    n = enc["input_ids"].shape[1]
    masked = tuple(sorted({int(p) for p in mask_tokens}))
    if masked and not 0 <= masked[0] <= masked[-1] < n:
        raise ValueError(f"mask_tokens={list(masked)} must be token positions 0..{n - 1}")
    knobs = Knobs(use_scale=use_scale, temperature=temperature, ablate=heads, mask_tokens=masked)
    record = Recording()
    dev = torch.device(model.device)
    inputs = {k: v.to(dev) for k, v in enc.items() if k != "special_tokens_mask"}
    with torch.inference_mode():
        out = model.model(
            **inputs,
            output_hidden_states=model.model_type in POST_LN,
            attnviz_knobs=knobs,
            attnviz_record=record,
        )
        hidden = out.last_hidden_state  # [batch, n, d_model]
        keep = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [batch, n, 1]
        embedding = (hidden * keep).sum(1) / keep.sum(1).clamp_min(1e-9)  # [batch, d_model]
        outputs = []
        for i, layer in enumerate(model.layers):
            z = record.layers[i]["z"]  # [batch, head, n, d_head]
            z_cat = z.transpose(1, 2).reshape(-1, z.shape[1] * z.shape[3])  # [batch * n, d_model]
            w_o = layer.attention.output.dense  # the same W_O the model applies next; exact
            out_i = torch.addmm(w_o.bias, z_cat, w_o.weight.t())  # [batch * n, d_model]
            outputs.append(out_i.view(z.shape[0], n, -1))  # [batch, n, d_model]

    on_cpu = dev.type == "cpu" and hidden.dtype == torch.float32

    def cpu(t: torch.Tensor) -> torch.Tensor:
        return t if on_cpu else t.to("cpu", torch.float32)

    def keep(t: torch.Tensor) -> torch.Tensor:
        # LayerTrace stores tensors where they are and converts on access (attnviz.trace): on a
        # GPU, a view copies to the CPU only what it draws, not every tensor of the trace.
        return t

    meta = {
        "device": model.device,
        "use_scale": use_scale,
        "temperature": temperature,
        "ablate": sorted(heads),
        "mask_tokens": list(masked),
        "max_length": limit,
        "model_type": model.model_type,
        "embedding": "mean-pooled over the attention mask, not L2-normalised",
    }
    traces = []
    for b, ids in enumerate(enc["input_ids"].tolist()):
        mask = torch.ones(n, n, dtype=torch.bool)  # [q, k]
        if record.mask is not None:
            mask &= cpu(record.mask[min(b, record.mask.shape[0] - 1), 0]).bool()  # [q|1, k]
        layers = []
        for i in range(model.n_layers):
            rec = record.layers[i]
            x = out.hidden_states[i][b] if out.hidden_states is not None else None  # [n, d_model]
            layers.append(
                LayerTrace(
                    q=keep(rec["q"][b]),  # [head, n, d_head]
                    k=keep(rec["k"][b]),  # [head, n, d_head]
                    v=keep(rec["v"][b]),  # [head, n, d_head]
                    scores=keep(rec["scores"][b]),  # [head, n, n]
                    scale=float(rec["scale"]),
                    mask=mask,  # [n, n] shared by all layers
                    weights=keep(rec["weights"][b]),  # [head, n, n]
                    z=keep(rec["z"][b]),  # [head, n, d_head]
                    output=keep(outputs[i][b]),  # [n, d_model]
                    x=None if x is None else keep(x),
                )
            )
        traces.append(
            Trace(
                tokens=model.tokenizer.convert_ids_to_tokens(ids),
                layers=layers,
                source=model.name,
                truncated=n_input[b] > sum(enc["attention_mask"][b].tolist()),
                n_input_tokens=n_input[b],
                token_types=enc["token_type_ids"][b].tolist()
                if "token_type_ids" in enc
                else [0] * n,
                special=_special(model, ids),
                hidden=cpu(hidden[b]),  # [n, d_model]
                embedding=cpu(embedding[b]),  # [d_model]
                meta=dict(meta),
            )
        )
    return traces


def trace_model(
    model: LoadedModel,
    text: str,
    text_pair: str | None = None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    mask_tokens: Iterable[int] = (),
    max_length: int | None = None,
) -> Trace:
    """Run `text` (and an optional second segment) through the model and record every layer.

    The knobs hold for this call only: use_scale=False drops the 1/sqrt(d_head) factor, temperature
    divides the logits, `ablate` zeroes the z of (layer, head) pairs before W_O, `mask_tokens` are
    key positions no query may attend to in any layer. Inputs past `max_length` (default: the
    model's limit) are truncated and the trace says so. A blank text_pair means none.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty: type a sentence to trace")
    pairs = None if text_pair is None or not text_pair.strip() else [text_pair]
    return trace_batch(
        model, [text], pairs, use_scale, temperature, ablate, mask_tokens, max_length
    )[0]


def embedding_cosine(a: Trace, b: Trace) -> float:
    """Cosine similarity of two traces' sentence embeddings (1 = the knobs changed nothing)."""
    if a.embedding is None or b.embedding is None:
        raise ValueError("both traces need an embedding: trace them with trace_model()")
    return float(F.cosine_similarity(a.embedding, b.embedding, dim=0))
