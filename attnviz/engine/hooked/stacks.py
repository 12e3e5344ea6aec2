"""Where each family keeps what an attention score is made of: a stack's embeddings (split into
the token's, the position's and the segment's where the family adds them), its layers, the norm
before each attention block (pre-LN) or after each sublayer (post-LN), and each block's query and
key projections (a fused one sliced), q/k norms and rotary embedding.

Plain lookups on a loaded model, as readout.py is for the logits; measures/qk.py does the maths.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import Any

import torch

from attnviz.engine.hooked.families import (
    BERT_FAMILY,
    BLOCK_PATHS,
    CROSS,
    DECODER,
    ENCODER,
    POST_LN,
)
from attnviz.engine.hooked.loading import Block, LoadedModel
from attnviz.engine.hooked.readout import attention_out_norm, residual_multiplier

# The embedding modules whose outputs add up to what enters the first layer (or the embeddings'
# norm), by the part each one is, relative to the stack's root. A family not listed has one
# part, "embedding": all that enters layer 0 (Llama's tokens, Gemma's scaled).
_BERT_PIECES = (
    ("embedding", "embeddings.word_embeddings"),
    ("position embedding", "embeddings.position_embeddings"),
    ("token type embedding", "embeddings.token_type_embeddings"),
)
EMBEDDING_PIECES = {
    **dict.fromkeys(BERT_FAMILY, _BERT_PIECES),
    "gpt2": (("embedding", "wte"), ("position embedding", "wpe")),
    "bart": (("embedding", "embed_tokens"), ("position embedding", "embed_positions")),
}
EMBEDDING_NORM = {**dict.fromkeys(POST_LN, "embeddings.LayerNorm"), "bart": "layernorm_embedding"}
# The norm a pre-LN layer applies before its attention block, relative to the layer.
_LLAMA_NORM = "input_layernorm"
PRE_ATTENTION_NORM = {
    "gpt2": "ln_1",
    "roberta-prelayernorm": "attention.LayerNorm",
    "xlm-roberta-xl": "attention.self_attn_layer_norm",
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma3_text"), _LLAMA_NORM),
    **dict.fromkeys(("phi3", "granite"), _LLAMA_NORM),
}
# Post-LN layers: their norms in order, each after a sublayer's residual add, by stack part.
_BERT_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")
POST_NORMS = {
    **{(family, ENCODER): _BERT_NORMS for family in POST_LN},
    ("bart", ENCODER): ("self_attn_layer_norm", "final_layer_norm"),
    ("bart", DECODER): ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"),
}


def _get(root: Any, path: str) -> Any:
    return reduce(getattr, path.split("."), root)


@dataclass(frozen=True, eq=False)
class Stack:
    """One stack of layers that a residual stream runs through (an encoder's, a decoder's)."""

    part: str  # "encoder" or "decoder": the stack, not the block
    root: Any  # the module its paths are relative to
    layers: tuple[Any, ...]
    blocks: tuple[tuple[Block, ...], ...]  # per layer, the attention blocks in the order it runs
    pieces: tuple[tuple[str, Any], ...]  # (kind, embedding module)
    embedding_norm: Any | None  # post-LN: the norm of the summed embeddings
    post_norms: tuple[tuple[Any, ...], ...]  # per layer; () for pre-LN
    out_norms: tuple[Any | None, ...]  # per layer: a norm on the attention output (Gemma 3)
    pre_norms: tuple[Any | None, ...]  # per layer: the norm before its (self-)attention block
    multiplier: float  # what a block's output is multiplied by (Granite), else 1
    final_norm: Any | None  # what the stack's output goes through last (cross-attention keys)

    @property
    def prefix(self) -> str:
        return self.part[0].upper() + ":"


def stack_of(model: LoadedModel, part: str) -> Stack:
    """The stack whose stream feeds `part`'s blocks ("encoder", "decoder"; "cross" blocks sit in
    the decoder's layers)."""
    kind, family = model.kind, model.model_type
    base = model.model.base_model
    part = DECODER if part == CROSS else part
    if kind == "encoder-decoder":
        root = base.encoder if part == ENCODER else base.decoder
    else:
        root = base
    wanted = (part,) if part == ENCODER else (DECODER, CROSS)
    found = [b for b in model.blocks if b.part in wanted]
    n = max(b.layer for b in found) + 1
    blocks = tuple(tuple(b for b in found if b.layer == i) for i in range(n))
    layers = _layers(model, part)
    norms = POST_NORMS.get((family, part), ())
    pre = PRE_ATTENTION_NORM.get(family)
    final = None
    if kind == "encoder-decoder" and part == ENCODER:
        final = getattr(root, "layer_norm", None)
    return Stack(
        part=part,
        root=root,
        layers=layers,
        blocks=blocks,
        pieces=tuple((k, _get(root, p)) for k, p in EMBEDDING_PIECES.get(family, ())),
        embedding_norm=_get(root, EMBEDDING_NORM[family]) if family in EMBEDDING_NORM else None,
        post_norms=tuple(tuple(_get(layer, name) for name in norms) for layer in layers),
        out_norms=tuple(
            attention_out_norm(model, layer) if kind == "decoder" else None for layer in layers
        ),
        pre_norms=tuple(None if pre is None else _get(layer, pre) for layer in layers),
        multiplier=residual_multiplier(model),
        final_norm=final,
    )


def _layers(model: LoadedModel, part: str) -> tuple[Any, ...]:
    path = next(p for which, p, _, _ in BLOCK_PATHS[model.model_type] if which == part)
    return tuple(_get(model.model.base_model, path))


@dataclass(frozen=True, eq=False)
class Side:
    """How one side (queries or keys) of a block is computed from its normed input x:
    rope(norm(x @ weight + bias)), per head of `d_head` columns."""

    weight: torch.Tensor  # [d_model, heads * d_head] float64 CPU
    bias: torch.Tensor | None  # [heads * d_head] float64 CPU
    norm: Any | None  # q_norm / k_norm (Qwen 3, Gemma 3: over one head; OLMo 2: over all)
    per_head_norm: bool


def _linear(module: Any, rows: slice | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A projection as x @ weight + bias (weight [in, out]), float64 CPU, rows of the output."""
    conv = type(module).__name__ == "Conv1D"
    w = module.weight.detach().double().cpu()
    w = w if conv else w.t()  # [in, out]
    b = None if module.bias is None else module.bias.detach().double().cpu()
    if rows is not None:
        w, b = w[:, rows], None if b is None else b[rows]
    return w, b


def head_dim(block: Block) -> int:
    """The block's own d_head (an encoder-decoder's stacks may have different head counts)."""
    w_o = block.w_o
    width = w_o.weight.shape[0] if type(w_o).__name__ == "Conv1D" else w_o.weight.shape[1]
    return width // block.n_heads


def sides(block: Block, d_head: int) -> tuple[Side, Side]:
    """The query side and the key side of a block."""
    att = block.attention
    q_n, k_n = block.n_heads * d_head, block.n_kv_heads * d_head
    if hasattr(att, "c_attn"):  # GPT-2: q, k, v fused, Conv1D
        d = att.c_attn.weight.shape[0]
        q, k = _linear(att.c_attn, slice(0, d)), _linear(att.c_attn, slice(d, 2 * d))
    elif hasattr(att, "qkv_proj"):  # Phi-3: q, k, v fused
        q = _linear(att.qkv_proj, slice(0, q_n))
        k = _linear(att.qkv_proj, slice(q_n, q_n + k_n))
    elif hasattr(att, "query"):  # BERT
        q, k = _linear(att.query), _linear(att.key)
    else:
        q, k = _linear(att.q_proj), _linear(att.k_proj)
    out = []
    for (w, b), name in ((q, "q_norm"), (k, "k_norm")):
        norm = getattr(att, name, None)
        weight = getattr(norm, "weight", None)
        per_head = norm is not None and weight is not None and weight.numel() == d_head
        out.append(Side(w, b, norm, per_head))
    return out[0], out[1]


def rotary(block: Block) -> Callable | None:
    """The family's own apply_rotary_pos_emb (q, k, cos, sin), or None where it has none."""
    module = importlib.import_module(type(block.attention).__module__)
    return getattr(module, "apply_rotary_pos_emb", None)
