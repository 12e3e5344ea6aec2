"""The input of an attention block, at a few positions, as a sum of parts: the embeddings (the
token's, the position's, the segment's, where the family adds them), each earlier head's write
z_h W_O^h, each earlier attention's output bias, each earlier MLP's output, and the biases of the
norms on the way, with every norm's scale frozen at its position (so each norm is linear, as
measures/lens.py does for the final norm). The parts add up to what the block's projections
read; measures/qk.py projects them onto a head's queries and keys.

The states come from one rerun of the trace's input (engine/hooked/states.py) that reads, at the
positions, what each embedding, layer, norm and output projection takes and gives, and stops at
the block asked for. A post-LN model (BERT, BART) is walked norm by norm; a pre-LN one reads each
MLP as what its layer added less what its attention wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from attnviz.engine.hooked.loading import Block, LoadedModel
from attnviz.engine.hooked.readout import freeze, w_o_bias, w_o_matrix
from attnviz.engine.hooked.stacks import Stack, stack_of
from attnviz.engine.hooked.states import States, read_states
from attnviz.engine.trace import Trace


@dataclass
class Part:
    """One additive part of a block's input at the positions read. [positions, d_model] float64"""

    kind: str  # embedding, position embedding, token type embedding, head, attention bias, mlp,
    # norm bias
    layer: int | None
    head: int | None
    vector: torch.Tensor
    part: str | None = None  # the block a head belongs to ("encoder", "decoder", "cross")


def _names(stack: Stack, upto: tuple[int, int] | None) -> dict[str, Any]:
    """The modules to read for the stack's stream up to block `upto` (layer, index in the
    layer; None: the whole stack and its final norm)."""
    p, mods = stack.prefix, {}
    for kind, module in stack.pieces:
        mods[f"{p}emb:{kind}"] = module
    if stack.embedding_norm is not None:
        mods[f"{p}embnorm"] = stack.embedding_norm
    for i, layer in enumerate(stack.layers):
        mods[f"{p}layer{i}"] = layer
        if stack.pre_norms[i] is not None:
            mods[f"{p}pre{i}"] = stack.pre_norms[i]
        for b, block in enumerate(stack.blocks[i]):
            mods[f"{p}att{i}.{b}"] = block.attention
            if (i, b) == upto:
                return mods
            mods[f"{p}wo{i}.{b}"] = block.w_o
            if stack.post_norms[i]:
                mods[f"{p}layer{i}.norm{b}"] = stack.post_norms[i][b]
        if stack.post_norms[i]:
            mods[f"{p}layer{i}.norm{len(stack.blocks[i])}"] = stack.post_norms[i][-1]
    if stack.final_norm is not None:
        mods[f"{p}final"] = stack.final_norm
    return mods


def _total(parts: list[Part]) -> torch.Tensor:
    return torch.stack([p.vector for p in parts]).sum(0)


def _check(parts: list[Part], want: torch.Tensor, where: str) -> None:
    got, want = _total(parts), want.double()
    if (got - want).abs().max() > 1e-3 * (1 + float(want.abs().max())):
        raise ValueError(
            f"{where}: the parts do not add up to what the model computed there; this model's "
            "layout is not one attnviz can split"
        )


def _through(parts: list[Part], norm: Any, x: torch.Tensor, layer: int | None) -> None:
    """Every part through `norm` frozen at its input x [positions, d]; its bias a part."""
    frozen = freeze(norm, x)
    through = frozen.apply(torch.stack([p.vector for p in parts]))  # one op for every part
    for p, v in zip(parts, through, strict=True):
        p.vector = v
    if frozen.bias is not None:
        parts.append(Part("norm bias", layer, None, frozen.bias.expand_as(parts[0].vector)))


def _embeddings(stack: Stack, got: States) -> list[Part]:
    p = stack.prefix
    first = got.inputs[f"{p}embnorm" if stack.embedding_norm is not None else f"{p}layer0"]
    first = first.double()
    if not stack.pieces:
        return [Part("embedding", None, None, first)]
    parts = [
        Part(kind, None, None, got.outputs[f"{p}emb:{kind}"].double()) for kind, _ in stack.pieces
    ]
    _check(parts, first, "the embeddings")
    return parts


def _writes(stack: Stack, block: Block, got: States, i: int, b: int) -> list[Part]:
    """Block b of layer i's heads and output bias, as they reach the stream."""
    p = stack.prefix
    z = got.inputs[f"{p}wo{i}.{b}"].double()  # [positions, head * d_head]
    w = w_o_matrix(block).detach().double().cpu()  # [head * d_head, d_model]
    heads = block.n_heads
    z = z.view(z.shape[0], heads, -1).transpose(0, 1)  # [head, positions, d_head]
    writes = torch.bmm(z, w.view(heads, -1, w.shape[-1]))  # [head, positions, d_model]
    parts = [Part("head", i, h, writes[h], part=block.part) for h in range(heads)]
    bias = w_o_bias(block)
    if bias is not None:
        parts.append(
            Part(
                "attention bias",
                i,
                None,
                bias.detach().double().cpu().expand_as(parts[0].vector),
                part=block.part,
            )
        )
    norm = stack.out_norms[i] if b == 0 else None
    if norm is not None:  # Gemma 3: a norm on the attention output, frozen at it
        frozen = freeze(norm, got.outputs[f"{p}wo{i}.{b}"])
        for part in parts:
            part.vector = frozen.apply(part.vector)
    for part in parts:
        part.vector = part.vector * stack.multiplier
    return parts


def block_inputs(
    stack: Stack, got: States, collapse: Callable[[list[Part]], list[Part]] | None = None
) -> Iterator[tuple[int, int, list[Part]]]:
    """For each block in order, (layer, index, the parts of what it reads, through its
    pre-attention norm); then (-1, -1, the parts of the stack's output). Each post-LN norm and
    each block's input is checked against what the model computed; the states read may stop at
    any block (the walk is not taken further than it is consumed). `collapse`: parts -> fewer
    parts adding up to the same (summed by source), applied after each layer: every norm being
    linear once frozen, sums go through them as their parts would."""
    p = stack.prefix
    parts = _embeddings(stack, got)
    if stack.embedding_norm is not None:
        _through(parts, stack.embedding_norm, got.inputs[f"{p}embnorm"], None)
    for i in range(len(stack.layers)):
        start, norms = len(parts), stack.post_norms[i]
        for b, block in enumerate(stack.blocks[i]):
            yield i, b, _block_input(stack, got, parts, i, b)
            parts += _writes(stack, block, got, i, b)
            if norms:
                _check(parts, got.inputs[f"{p}layer{i}.norm{b}"], f"layer {i}'s norm {b}")
                _through(parts, norms[b], got.inputs[f"{p}layer{i}.norm{b}"], i)
        if norms:  # post-LN: what entered the MLP's norm, less every part so far
            last = got.inputs[f"{p}layer{i}.norm{len(stack.blocks[i])}"].double()
            parts.append(Part("mlp", i, None, last - _total(parts)))
            _through(parts, norms[-1], last, i)
        else:  # pre-LN: how the layer changed the stream, less what its attention wrote
            change = got.outputs[f"{p}layer{i}"].double() - got.inputs[f"{p}layer{i}"].double()
            parts.append(Part("mlp", i, None, change - _total(parts[start:])))
        if collapse is not None:
            parts = collapse(parts)
    if stack.final_norm is not None:
        _through(parts, stack.final_norm, got.inputs[f"{p}final"], None)
    yield -1, -1, parts


def walk(stack: Stack, got: States, upto: tuple[int, int] | None) -> list[Part]:
    """The parts of what block `upto` (layer, index) reads; or of the stack's output (None)."""
    want = (-1, -1) if upto is None else upto
    return next(parts for i, b, parts in block_inputs(stack, got) if (i, b) == want)


def _block_input(stack: Stack, got: States, parts: list[Part], i: int, b: int) -> list[Part]:
    """Copies of the parts, through the block's pre-attention norm (pre-LN, first block)."""
    p = stack.prefix
    out = [Part(q.kind, q.layer, q.head, q.vector, q.part) for q in parts]
    pre = stack.pre_norms[i] if b == 0 else None
    if pre is not None:
        _through(out, pre, got.inputs[f"{p}pre{i}"], i)
    _check(out, got.inputs[f"{p}att{i}.{b}"], f"the input of layer {i}'s attention")
    return out


def stack_parts(
    model: LoadedModel,
    trace: Trace,
    part: str,
    positions: list[int],
    collapse: Callable[[list[Part]], list[Part]] | None = None,
) -> tuple[Stack, Iterator[tuple[int, int, list[Part]]], States]:
    """Every block's input parts of one stack at `positions`, from one whole rerun."""
    stack = stack_of(model, part)
    got = read_states(model, trace, _names(stack, None), positions, None, stack.part != "encoder")
    return stack, block_inputs(stack, got, collapse), got


def block_parts(
    model: LoadedModel, trace: Trace, block: Block, positions: list[int]
) -> tuple[list[Part], tuple | None]:
    """The parts of `block`'s input at `positions` (of its own tokens: the decoder's for a
    decoder or cross block), and RoPE's (cos, sin) there as the block received them (None
    without RoPE)."""
    stack = stack_of(model, block.part)
    index = stack.blocks[block.layer].index(block)
    mods = _names(stack, (block.layer, index))
    last = f"{stack.prefix}att{block.layer}.{index}"
    got = read_states(model, trace, mods, positions, last, decoder=stack.part != "encoder")
    return walk(stack, got, (block.layer, index)), got.extra.get(last)


def encoder_output_parts(model: LoadedModel, trace: Trace, positions: list[int]) -> list[Part]:
    """The parts of an encoder-decoder's encoder output at `positions` (a cross block's keys)."""
    stack = stack_of(model, "encoder")
    mods = _names(stack, None)
    last = f"{stack.prefix}layer{len(stack.layers) - 1}" if stack.final_norm is None else None
    last = f"{stack.prefix}final" if stack.final_norm is not None else last
    got = read_states(model, trace, mods, positions, last)
    parts = walk(stack, got, None)
    want = got.outputs[last]
    _check(parts, want, "the encoder's output")
    return parts
