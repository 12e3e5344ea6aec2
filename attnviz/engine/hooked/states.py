"""What enters and leaves named modules of a traced input at chosen positions: the input run again
through its model (the trace's what-if knobs, lean attention) while forward hooks read each module
at those positions, and stop the run as soon as the last module needed has been read.

engine/hooked/stream.py reads a decoder's residual stream at one position for the logits; this
reads any stack (an encoder's too) at several positions, for the split of an attention score
into what its query and key carry (measures/qk.py). A causal decoder's prefix is all a position
depends on, so the rerun stops at the last position asked for and at the block that needs it:
one cell of a 4,096-token trace in layer 3 costs three layers of the tokens before it.

The hooks live for one call and act only in the thread that registered them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import torch

from attnviz.engine.hooked.hooks import forward_hook, forward_pre_hook
from attnviz.engine.hooked.intercept import Call
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.stream import _ids, _knobs, _real_length, decoder_part
from attnviz.engine.trace import Trace


class _Done(Exception):
    """Raised by the hook of the last module needed: the rest of the forward is not run."""


@dataclass
class States:
    """By module name, what entered it (`inputs`) and what it gave (`outputs`) at `positions`,
    float32 CPU [len(positions), ...]; `extra[name]` holds an attention module's keyword
    tensors there (`position_embeddings`: RoPE's (cos, sin), each [len(positions), d])."""

    positions: list[int]
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    extra: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)

    def row(self, position: int) -> int:
        """Where `position` sits in this record's rows."""
        return self.positions.index(position)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, tuple) else value


def _pick(t: Any, at: torch.Tensor) -> torch.Tensor | None:
    """Batch row 0 of t [batch, n, ...] (or an unbatched [n, ...]) at the positions."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2:
        return None
    rows = t[0] if t.dim() >= 3 else t
    if int(at.max()) >= rows.shape[0]:  # another stack's call of a shared module (BART's tokens)
        return None
    return rows[at.to(rows.device)].detach().to("cpu", torch.float32)


@contextmanager
def _hooks(mods: dict[str, Any], at: torch.Tensor, got: States, last: str | None) -> Iterator[None]:
    me = threading.get_ident()

    def before(name: str):
        def read(module, args, kwargs) -> None:
            if threading.get_ident() != me:  # another session's forward of the same model
                return
            x = args[0] if args else kwargs.get("hidden_states")
            got.inputs[name] = _pick(x, at)
            cos_sin = kwargs.get("position_embeddings")
            if isinstance(cos_sin, tuple):
                got.extra[name] = tuple(_pick(t, at) for t in cos_sin)

        return read

    def after(name: str):
        def read(module, args, kwargs, output) -> None:
            if threading.get_ident() != me:
                return
            got.outputs[name] = _pick(_first(output), at)
            if name == last:
                raise _Done

        return read

    handles = [
        h
        for n, m in mods.items()
        for h in (
            forward_pre_hook(m, before(n)),
            forward_hook(m, after(n)),
        )
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _inputs(
    model: LoadedModel, trace: Trace, n: int, dev: torch.device, decoder: bool
) -> dict[str, Any]:
    """The model's inputs for the trace's first n real tokens (the decoder's when `decoder`),
    as tracing gave them: the second segment's token types, the encoder's tokens."""
    if model.kind == "encoder-decoder":
        dec = decoder_part(model, trace)
        enc_ids = _ids(model, trace, _real_length(trace)).to(dev)
        dec_ids = _ids(model, dec, n if decoder else _real_length(dec)).to(dev)
        return {
            "input_ids": enc_ids,
            "attention_mask": torch.ones_like(enc_ids),
            "decoder_input_ids": dec_ids,
            "decoder_attention_mask": torch.ones_like(dec_ids),
        }
    ids = _ids(model, trace, n).to(dev)
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if model.kind == "encoder" and trace.token_types is not None:
        out["token_type_ids"] = torch.tensor([trace.token_types[:n]], device=dev)
    return out


def read_states(
    model: LoadedModel,
    trace: Trace,
    mods: dict[str, Any],
    positions: list[int],
    last: str | None = None,
    decoder: bool = False,
) -> States:
    """Run the trace's input again and read `mods` (name -> module) at `positions` of the
    tokens (the decoder's when `decoder`), stopping after module `last` has run (None: the whole
    forward). A decoder runs only the positions asked for (`_positions_only`); an encoder or an
    encoder-decoder runs its whole input."""
    if trace.source != model.name:
        raise ValueError(f"this trace comes from {trace.source!r}, not from {model.name!r}")
    positions = list(positions)
    if model.kind == "decoder":
        return _positions_only(model, trace, mods, positions, last)
    tokens = decoder_part(model, trace) if decoder else trace
    n = _real_length(tokens)
    if decoder and model.kind == "encoder-decoder":
        n = max(positions) + 1  # causal: nothing later reaches these positions
    got = States(positions=positions)
    inputs = _inputs(model, trace, n, torch.device(model.device), decoder)
    _run(model, trace, inputs, _hooks(mods, torch.tensor(positions), got, last))
    _reached(got, last)
    return got


def _run(model: LoadedModel, trace: Trace, inputs: dict[str, Any], hooks: Any) -> None:
    with torch.inference_mode(), hooks, suppress(_Done):
        model.model(**inputs, attnviz_call=Call(_knobs(model, trace)), **_no_logits(model))


def _reached(got: States, last: str | None) -> None:
    if last is not None and got.inputs.get(last) is None:
        raise RuntimeError(
            f"the rerun never reached {last}: this model is not laid out as expected"
        )


def _positions_only(
    model: LoadedModel, trace: Trace, mods: dict[str, Any], positions: list[int], last: str | None
) -> States:
    """A decoder's states at `positions` without running the rest of its input: everything a
    layer does outside attention acts on each position alone, and the trace holds what every
    attention block gave at every position (z, silenced heads 0). So the tokens at `positions`
    alone go through the model with their own position ids, and each block's output projection
    is handed the trace's z there instead of what attention computed over those few tokens."""
    dev = torch.device(model.device)
    n = _real_length(trace)
    if max(positions) >= n:
        raise ValueError(f"position {max(positions)} is outside the {n} tokens of this input")
    ids = _ids(model, trace, n)[:, positions].to(dev)
    at = torch.tensor(positions)
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": at.unsqueeze(0).to(dev),
    }
    got = States(positions=positions)
    rows = torch.arange(len(positions))
    with _traced_z(model, trace, at):
        _run(model, trace, inputs, _hooks(mods, rows, got, last))
    _reached(got, last)
    return got


@contextmanager
def _traced_z(model: LoadedModel, trace: Trace, at: torch.Tensor) -> Iterator[None]:
    """Each block's output projection reads the trace's z at positions `at`, not its input."""
    me = threading.get_ident()

    def hook(layer: int):
        def swap(module, args, kwargs):
            if threading.get_ident() != me:
                return None
            x = args[0] if args else kwargs["input"]
            z = trace.layers[layer].stored("z")[:, at.to(trace.layers[layer].device)]  # [h, P, d]
            z = z.transpose(0, 1).reshape(1, len(at), -1).to(x.device, x.dtype)
            return (z, *args[1:]), kwargs

        return swap

    handles = [forward_pre_hook(b.w_o, hook(b.layer)) for b in model.blocks]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _no_logits(model: LoadedModel) -> dict[str, Any]:
    """Ask a causal LM for one position's logits only (they are not read here)."""
    return {"logits_to_keep": 1} if model.kind == "decoder" else {}
