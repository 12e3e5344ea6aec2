"""A loaded model's float32 Linear layers on the CPU through oneDNN's matmul, not MKL's sgemm.

torch sends a float32 `F.linear` on the CPU to MKL, whose sgemm takes a slow path on AMD
processors: on this project's machine (AMD EPYC, AVX-512) a 128x576 @ 576x1536 product took 2.2 ms
through MKL and 1.0 ms through oneDNN's brgemm matmul, and SmolLM2's whole forward 226 against
130 ms (bench/onednn_linear.py). oneDNN's matmul is float32 through and through: no bfloat16
rounding (`exact()` checks that once per process), only another order of the same sums, so
hidden states move by ~1e-6 relative, float32's own rounding.

Used only where it applies: float32 input and weight on the CPU, no gradient asked for (the
training lab and attribution patching keep `F.linear`), the op present in this torch build and
exact. Set ATTNVIZ_ONEDNN_LINEAR=0 to keep torch's nn.Linear (a bench's baseline, or a build where
oneDNN is slower).

Each layer's weight is also kept in oneDNN's own blocked layout, made at its first product
(`packed`): given a plain weight, oneDNN reorders it on every product, which at a class's batches
(one to four 32-token sentences) cost as much as the product itself, since such a forward streams
every weight from memory. Same kernel, same bits (tests pin it); SmolLM2's forward of one
sentence 73 -> 51 ms of CPU, of four 40 -> 36 ms a sentence (bench/onednn_linear.py). It costs
a second copy of the layers' weights: only for a model whose linear layers hold at most
ATTNVIZ_PACKED_LINEAR_MB (default 1,536) MB of float32 weights; 0 turns it off.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def rows_alike(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias through oneDNN, each row's result the same whatever the number of rows:
    oneDNN's matmul gives a row the same bits for any M >= 2 (measured for M up to 4,096 on
    SmolLM2's, MiniLM's and Gemma 3's shapes) and takes another kernel for M = 1, so one row is
    sent as two. A sentence's numbers then do not depend on the batch it was traced in, and a
    patched run's metric matches its unpatched run's exactly where nothing changed."""
    if x.numel() != x.shape[-1]:
        return _onednn(x, weight, bias)
    two = _onednn(x.reshape(1, -1).expand(2, -1), weight, bias)
    return two[:1].reshape(*x.shape[:-1], weight.shape[0])


def _sample(seed: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A probe's input [rows, 576], weight [64, 576] and bias [64], random from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=gen) for s in ((rows, 576), (64, 576), (64,)))


@functools.cache
def exact() -> bool:
    """Whether this torch build has oneDNN's linear and it computes in float32: 1 + 2^-10 (lost
    when rounded to bfloat16, whose mantissa has 8 bits) summed 576 times comes back exactly, and
    a random product matches F.linear to float32 rounding."""
    if not torch.backends.mkldnn.is_available() or not hasattr(
        torch.ops.mkldnn, "_linear_pointwise"
    ):
        return False
    try:
        ones = torch.ones(64, 576)
        fine = _onednn(torch.full((8, 576), 1 + 2**-10), ones, None)
        x, w, b = _sample(seed=0, rows=8)
        got, want = _onednn(x, w, b), F.linear(x, w, b)
    except RuntimeError:  # a build without the kernel for this processor
        return False
    return bool((fine == 576 * (1 + 2**-10)).all()) and torch.allclose(
        got, want, rtol=1e-5, atol=1e-4
    )


def wanted() -> bool:
    return os.environ.get("ATTNVIZ_ONEDNN_LINEAR", "1") != "0"


PACKED_MB = 1536  # a model's float32 linear weights that may be kept packed too (MB)
_PACK_ROWS = 32  # the rows oneDNN is told to expect when it picks the layout (any M gives the same)


def packing_budget() -> int:
    """Bytes of float32 linear weights a model may keep a packed copy of (ATTNVIZ_PACKED_LINEAR_MB;
    a value that is not a whole number keeps the default)."""
    raw = os.environ.get("ATTNVIZ_PACKED_LINEAR_MB", "").strip()
    mb = int(raw) if raw.isdigit() else PACKED_MB
    return mb * 2**20


@functools.cache
def can_pack() -> bool:
    """Whether this build reorders a weight into oneDNN's layout and gives the same bits with it."""
    reorder = getattr(torch.ops.mkldnn, "_reorder_linear_weight", None)
    if reorder is None or not exact():
        return False
    x, w, b = _sample(seed=1, rows=5)
    try:
        return torch.equal(_onednn(x, reorder(w, _PACK_ROWS), b), _onednn(x, w, b))
    except RuntimeError:
        return False


class OneDNNLinear(nn.Linear):
    """nn.Linear whose float32 CPU product without gradients goes through oneDNN, and whose other
    products without gradients get a contiguous input: a decoder's last positions, `hidden[:, -1:]`
    (transformers' `logits_to_keep=1`), are a strided view that F.linear multiplies as a batched
    matmul, the weight copied once per sentence (SmolLM2's lm_head, four sentences in bfloat16:
    436 against 4.5 ms)."""

    packs = False  # keep the weight in oneDNN's layout too (use_onednn sets it per layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
            return F.linear(x, w, self.bias)  # the graph's path, as nn.Linear
        fp32 = x.dtype is torch.float32 and w.dtype is torch.float32
        if fp32 and x.device.type == "cpu" and w.device.type == "cpu" and exact():
            return rows_alike(x, self.packed() if self.packs else w, self.bias)
        return F.linear(x.contiguous(), w, self.bias)

    def packed(self) -> torch.Tensor:
        """The weight in oneDNN's blocked layout, made again when the weight changed (another
        tensor, or written in place)."""
        w = self.weight
        stamp = (w.data_ptr(), w._version, tuple(w.shape))
        held = self.__dict__.get("_packed")
        if held is None or held[0] != stamp:
            held = (stamp, torch.ops.mkldnn._reorder_linear_weight(w.detach(), _PACK_ROWS))
            self.__dict__["_packed"] = held  # not a parameter or buffer: never saved or moved
        return held[1]

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        return {k: v for k, v in state.items() if k != "_packed"}  # made again where unpickled


def use_onednn(model: Any) -> int:
    """Switch `model`'s plain nn.Linear layers to OneDNNLinear in place (same parameters, same
    hooks; a layer moved to another device or dtype later takes F.linear by itself), each keeping
    a packed weight when the model's float32 linear weights fit packing_budget(). Returns how many
    were switched: 0 when ATTNVIZ_ONEDNN_LINEAR=0."""
    if not wanted():
        return 0
    layers = [m for m in model.modules() if type(m) is nn.Linear]
    weights = {id(m.weight): m.weight for m in layers if m.weight.dtype is torch.float32}
    nbytes = sum(w.numel() * 4 for w in weights.values())  # a tied weight (lm_head) counted once
    packs = 0 < nbytes <= packing_budget() and can_pack()
    for module in layers:
        module.__class__ = OneDNNLinear
        module.packs = packs
    return len(layers)
