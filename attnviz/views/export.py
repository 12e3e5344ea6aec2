"""What a download holds: a small JSON for sharing, full-precision .npz for research. No streamlit.

The JSON carries the sentence(s), the model or the stack's config, every knob, the tokens and, per
layer, the scale, the mask and the softmax weights rounded to DECIMALS decimals: enough to redraw
every heatmap, at about layers · heads · n² · 6 bytes (`json_bytes`). A `Pick` chooses the layers
and heads and a threshold below which weights are left out (each head's weights above it as
parallel q, k, w lists): the default keeps a 512-token trace under 10 MB. Everything else
(q, k, v, scores, z, outputs, hidden states, the embedding) goes to the .npz at float32, built
only when someone asks for it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnviz.engine.trace import Trace
from attnviz.views.frames import to_numpy

DECIMALS = 3  # weights in the JSON: absolute error at most 5e-4
FORMAT = "attnviz-trace/3"
TENSORS = ("q", "k", "v", "scores", "weights", "z", "output")


def slug(name: str) -> str:
    """A model name or folder as a safe piece of a file name ("all-MiniLM-L6-v2")."""
    tail = str(name).rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-.")[:40] or "trace"


def knobs(trace: Trace) -> dict[str, Any]:
    """The settings that produced `trace`: the stack's whole config, or the BERT what-if knobs."""
    meta = dict(trace.meta)
    config = meta.pop("config", None)
    if dataclasses.is_dataclass(config):
        return {"kind": "stack", "config": dataclasses.asdict(config)}
    out = {"kind": "pretrained", "model": trace.source}
    for name in ("use_scale", "temperature", "ablate", "mask_tokens", "max_length", "model_type"):
        if name in meta:
            value = meta[name]
            out[name] = [list(v) for v in value] if name == "ablate" else value
    return out


@dataclass(frozen=True)
class Pick:
    """What the JSON holds: the layers and heads (None: all) and the weight below which a weight
    is left out (0: every weight, as a dense [head, q, k] list; above 0: for each head only the
    weights at or above it, as parallel lists q, k, w)."""

    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    threshold: float = 0.0

    def chosen(self, trace: Trace) -> list[tuple[int, list[int]]]:
        """(layer, heads) of each layer in the file."""
        layers = range(trace.n_layers) if self.layers is None else self.layers
        return [
            (
                la,
                [
                    h
                    for h in range(trace.layers[la].n_heads)
                    if self.heads is None or h in self.heads
                ],
            )
            for la in layers
            if 0 <= la < trace.n_layers
        ]


THRESHOLDS = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)  # what the default picks from
MOST_BYTES = 10 * 2**20  # the default JSON's size at most (a 512-token trace: 113 MB dense)
DENSE_BYTES = 6  # a weight: "0.123," (a sparse one adds its query and key: "211,63,")


def json_bytes(trace: Trace, pick: Pick = Pick()) -> int:
    """How many bytes `to_json(trace, ..., pick)` writes, within a few percent: counted, not
    guessed (the weights at or above a threshold are counted in one pass over every layer of a
    shape; layers that share a mask count its record once)."""
    n_q, n_k = len(trace.tokens), len(trace.key_tokens)
    total = 60 * (n_q + n_k) + 2048
    mask_bytes: dict[int, int] = {}  # a mask's id -> its record's bytes
    dense: dict[tuple, list[torch.Tensor]] = {}  # the weights written, by their [q, k] shape
    for la, heads in pick.chosen(trace):
        lt = trace.layers[la]
        if id(lt.mask) not in mask_bytes:
            mask_bytes[id(lt.mask)] = len(json.dumps(_mask_record(lt), separators=(",", ":")))
        total += mask_bytes[id(lt.mask)]
        if not heads:
            continue
        every = len(heads) == lt.n_heads and lt.holds_maps
        w = lt.weights if every else torch.stack([lt.head("weights", h) for h in heads])
        mask = lt.mask if lt.mask is not None else torch.ones(w.shape[1:], dtype=torch.bool)
        if pick.threshold <= 0:
            # a masked weight is exactly 0, counted as "0.0,": it is written "null,", one more
            total += len(heads) * int((~mask).sum()) + 2 * w.shape[0] * w.shape[1]
            dense.setdefault(tuple(w.shape[1:]), []).append(w)
        else:
            h, q, k = ((w >= pick.threshold) & mask).nonzero(as_tuple=True)
            total += _number_bytes(w[h, q, k]) + _index_bytes(q) + _index_bytes(k)
            total += 40 * len(heads)
    # every layer of a shape in one count: a count a layer cost ~30 small tensor calls a layer
    return total + sum(_number_bytes(torch.cat(ws)) for ws in dense.values())


def _number_bytes(w: torch.Tensor) -> int:
    """The characters of the weights rounded to DECIMALS decimals as JSON writes them, commas
    included: "0.0," "0.12," "0.123,": DECIMALS + 3 each, one fewer per trailing zero dropped
    (0.120 prints as 0.12, 0.100 and 0.0 as 0.1 and 0.0: at least one decimal stays)."""
    r = torch.round(w.float() * 10**DECIMALS)  # in thousandths (exact in float32 up to 1000)
    if r.numel() and float(r.min()) >= 0 and float(r.max()) <= 10**DECIMALS:
        # weights (0..1): how many of each value, times its characters (a class's page: 0.35 ms
        # against 0.86 for the counts below, 270 heads at 30 tokens)
        return int(torch.bincount(r.to(torch.int64).flatten(), minlength=10**DECIMALS + 1)
                   .dot(_CHARS_OF_THOUSANDTHS))  # fmt: skip
    total = (DECIMALS + 3) * r.numel()
    for d in range(1, DECIMALS):
        total -= int((torch.fmod(r, 10**d) == 0).sum())
    return total


def _chars_of_thousandths() -> torch.Tensor:
    """[10**DECIMALS + 1]: the characters of v / 10**DECIMALS as JSON writes it, comma included."""
    v = torch.arange(10**DECIMALS + 1)
    chars = torch.full_like(v, DECIMALS + 3)
    for d in range(1, DECIMALS):
        chars -= (v % 10**d == 0).long()
    return chars


_CHARS_OF_THOUSANDTHS = _chars_of_thousandths()


def _index_bytes(positions: torch.Tensor) -> int:
    """The characters of positions as JSON writes them, commas included."""
    digits = torch.floor(torch.log10(positions.double().clamp_min(1))) + 1
    return int((digits + 1).sum())


def default_pick(trace: Trace) -> Pick:
    """Every layer and head, and the smallest threshold of THRESHOLDS that keeps the file under
    MOST_BYTES (0 for a short input: every weight). One pass counts every threshold's weights
    (each ~ its query, key and value); json_bytes then says the chosen file's size exactly."""
    n_q, n_k = len(trace.tokens), len(trace.key_tokens)
    cells = sum(lt.n_heads for lt in trace.layers) * n_q * n_k
    # Every weight written, at most "0.123," each with its row's brackets, a mask listing every
    # pair in every layer: under MOST_BYTES, the whole file is (no count needed).
    most = (DENSE_BYTES + 1) * cells + 12 * n_q * n_k * trace.n_layers + 60 * (n_q + n_k) + 2048
    if most <= MOST_BYTES or (4 * cells <= MOST_BYTES and json_bytes(trace) <= MOST_BYTES):
        return Pick()  # "0.0," at the least
    cuts = torch.tensor(THRESHOLDS[1:], dtype=torch.float32)  # [t]
    kept = torch.zeros(len(cuts), dtype=torch.long)  # [t] weights at or above each
    for lt in trace.layers:
        for h in range(lt.n_heads):
            w = lt.head("weights", h).flatten()  # [q * k]
            kept += (
                torch.bucketize(w, cuts, right=True)
                .bincount(minlength=len(cuts) + 1)[1:]
                .flip(0)
                .cumsum(0)
                .flip(0)
            )
    entry = 2 * (len(str(max(n_q, n_k))) + 1) + DENSE_BYTES
    for threshold, n in zip(THRESHOLDS[1:], kept.tolist(), strict=True):
        if n * entry + 60 * (n_q + n_k) <= MOST_BYTES:
            return Pick(threshold=threshold)
    return Pick(threshold=THRESHOLDS[-1])


def _mask_record(lt) -> dict[str, Any] | None:
    """A layer's mask, small: None (every pair may attend); or "causal" (no key after its
    query) and "keys" hidden from every query (padding, hidden tokens); else every masked
    (query, key) pair."""
    mask = lt.mask
    if mask is None or bool(mask.all()):
        return None
    n_q, n_k = mask.shape
    keys = mask.any(0)  # [k] a key no query may see is hidden
    causal = n_q == n_k and not bool(mask.triu(1).any())
    rule = torch.ones(n_q, n_k, dtype=torch.bool)
    rule = rule.tril() if causal else rule
    if torch.equal(mask, rule & keys):
        return {"causal": causal, "keys": (~keys).nonzero().flatten().tolist()}
    return {"pairs": (~mask).nonzero().tolist()}


def _weights(lt, heads: list[int], threshold: float) -> dict[str, Any]:
    """One layer's weights at DECIMALS decimals, masked cells null (dense) or left out
    (sparse)."""
    mask = lt.mask
    if threshold <= 0:
        # float64 before rounding, so 0.123 prints as 0.123 and not as float32's 0.12300000339
        w = torch.stack([lt.head("weights", h) for h in heads])  # [head, q, k]
        w = np.round(to_numpy(w).astype(np.float64), DECIMALS)
        rows = w.tolist()
        if mask is not None and not bool(mask.all()):
            hidden = (~mask).nonzero().tolist()
            for head in rows:
                for i, j in hidden:
                    head[i][j] = None
        return {"heads": heads, "weights": rows}
    sparse = []
    for h in heads:
        w = lt.head("weights", h)  # [q, k]
        keep = w >= threshold
        if mask is not None:
            keep &= mask
        q, k = keep.nonzero(as_tuple=True)
        values = np.round(w[q, k].double().numpy(), DECIMALS)
        sparse.append({"head": h, "q": q.tolist(), "k": k.tolist(), "w": values.tolist()})
    return {"heads": heads, "threshold": threshold, "sparse": sparse}


def record(trace: Trace, text: str, pair: str | None = None, pick: Pick = Pick()) -> dict:
    """The JSON export as a dict (see the module docstring)."""
    scale = 10**DECIMALS
    layers = [
        {"layer": la, "scale": trace.layers[la].scale, "mask": _mask_record(trace.layers[la]),
         **_weights(trace.layers[la], heads, pick.threshold)}
        for la, heads in pick.chosen(trace)
    ]  # fmt: skip
    kept = "every weight" if pick.threshold <= 0 else f"the weights >= {pick.threshold:g}"
    return {
        "format": FORMAT,
        "text": text,
        "text_pair": pair,
        "source": trace.source,
        "knobs": knobs(trace),
        "tokens": trace.tokens,
        "key_tokens": trace.key_tokens,
        "truncated": trace.truncated,
        "n_input_tokens": trace.n_input_tokens,
        "special": trace.special,
        "precision": f"{kept}, rounded to {DECIMALS} decimals (error <= {0.5 / scale:g}); a "
        "masked cell is null (dense) or absent (sparse); mask: causal (no key after its query) "
        "and the keys hidden from every query, or every masked (query, key) pair; full float32 "
        "tensors: .npz",
        "layers": layers,
    }


def to_json(trace: Trace, text: str, pair: str | None = None, pick: Pick = Pick()) -> str:
    return json.dumps(record(trace, text, pair, pick), ensure_ascii=False, separators=(",", ":"))


def exportable(trace: Trace) -> bool:
    """Whether the trace can be written whole: a lean one (a long input) would build every head's
    n x n weights for the file."""
    return not any(layer.in_bands for layer in trace.layers)


def to_npz(trace: Trace, text: str, pair: str | None = None) -> bytes:
    """Every tensor at float32 (layer i's q is "L{i}.q"), plus the JSON header as "meta"."""
    arrays: dict[str, np.ndarray] = {}
    for i, lt in enumerate(trace.layers):
        for name in TENSORS:
            arrays[f"L{i}.{name}"] = to_numpy(getattr(lt, name))
        if lt.mask is not None:
            arrays[f"L{i}.mask"] = lt.mask.numpy().astype(bool)
    if trace.hidden is not None:
        arrays["hidden"] = to_numpy(trace.hidden)
    if trace.embedding is not None:
        arrays["embedding"] = to_numpy(trace.embedding)
    header = record(trace, text, pair, Pick(layers=()))
    del header["layers"]
    header["scales"] = [lt.scale for lt in trace.layers]
    header["precision"] = "float32, as computed"
    arrays["meta"] = np.array(json.dumps(header, ensure_ascii=False))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()
