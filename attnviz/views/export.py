"""What a download holds: a small JSON for sharing, full-precision .npz for research. No streamlit.

The JSON carries the sentence(s), the model or the stack's config, every knob, the tokens and, per
layer, the scale, the mask and the softmax weights rounded to DECIMALS decimals: enough to redraw
every heatmap, at about layers · heads · n² · 6 bytes (see `json_bytes_estimate`). Everything else
(q, k, v, scores, z, outputs, hidden states, the embedding) goes to the .npz at float32, built
only when someone asks for it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from typing import Any

import numpy as np

from attnviz.engine.trace import Trace
from attnviz.views.frames import to_numpy

DECIMALS = 3  # weights in the JSON: absolute error at most 5e-4
FORMAT = "attnviz-trace/2"
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


def record(trace: Trace, text: str, pair: str | None = None) -> dict[str, Any]:
    """The JSON export as a dict (see the module docstring)."""
    scale = 10**DECIMALS
    layers = []
    for lt in trace.layers:
        # float64 before rounding, so 0.123 prints as 0.123 and not as float32's 0.12300000339
        w = np.round(to_numpy(lt.weights).astype(np.float64), DECIMALS)  # [head, q, k]
        layers.append(
            {
                "scale": lt.scale,
                "masked": None if lt.mask is None else (~lt.mask).nonzero().tolist(),
                "weights": w.tolist(),
            }
        )
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
        "precision": f"weights rounded to {DECIMALS} decimals (error <= {0.5 / scale:g}); "
        "masked lists the (query, key) pairs that may not attend; full float32 tensors: .npz",
        "layers": layers,
    }


def to_json(trace: Trace, text: str, pair: str | None = None) -> str:
    return json.dumps(record(trace, text, pair), ensure_ascii=False, separators=(",", ":"))


def exportable(trace: Trace) -> bool:
    """Whether the trace can be written whole: a lean one (a long input) would build every head's
    n x n weights for the file."""
    return not any(layer.lean for layer in trace.layers)


def json_bytes_estimate(trace: Trace) -> int:
    """About how many bytes `to_json` writes: ~6 per weight ("0.123,") plus the tokens."""
    n_q, n_k = len(trace.tokens), len(trace.key_tokens)
    heads = sum(lt.n_heads for lt in trace.layers)
    return 6 * heads * n_q * n_k + 40 * (n_q + n_k) + 2048


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
    header = record(trace, text, pair)
    del header["layers"]
    header["scales"] = [lt.scale for lt in trace.layers]
    header["precision"] = "float32, as computed"
    arrays["meta"] = np.array(json.dumps(header, ensure_ascii=False))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()
