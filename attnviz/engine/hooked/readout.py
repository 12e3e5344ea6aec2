"""How each family turns its residual stream into next-token logits: the decoder layers, the norm
before the unembedding, the unembedding itself, and what sits between an attention block and the
residual stream (a post-attention norm, a multiplier, BART's post-LayerNorm).

Plain lookups on a loaded model plus one piece of maths, `freeze`: a LayerNorm or RMSNorm with its
scale frozen at one position is linear, y = P(x) / scale * weight + bias (P centres for a
LayerNorm and is the identity for an RMSNorm), so a sum of parts of x goes through it part by part.
This is what direct logit attribution needs (measures/lens.py).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import reduce
from typing import Any

import torch

from attnviz.engine.hooked.families import BLOCK_PATHS, CROSS, DECODER
from attnviz.engine.hooked.intercept import Recording
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.writes import w_o_gram

# The norm some families apply to an attention block's output before adding it to the residual
# stream (Llama's "post_attention_layernorm" is its pre-MLP norm instead: not listed).
ATTENTION_OUT_NORM = dict.fromkeys(("gemma2", "gemma3_text", "olmo2"), "post_attention_layernorm")
# Post-LayerNorm decoders: the norms of each layer, in order, each after its sublayer's residual
# add (self-attention, cross-attention, MLP); and the norm of the embeddings.
POST_LN_LAYER_NORMS = {
    "bart": ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")
}
POST_LN_EMBEDDING_NORM = {"bart": "layernorm_embedding"}
# The norm before the unembedding, relative to the base model (None: there is none).
FINAL_NORM = {"gpt2": "ln_f", "bart": None}


def w_o_matrix(block: Any) -> torch.Tensor:
    """A block's output projection as [n_heads * d_head, d_model] (concat(z) @ it), as stored."""
    w_o = block.w_o
    return w_o.weight if type(w_o).__name__ == "Conv1D" else w_o.weight.t()


# id(W_O weight) -> (a weak reference to it, (its storage, version, device), the heads' Gram
# matrices): computed once per weight, kept until it changes (in place or replaced) or is freed.
_GRAMS: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}


def w_o_gram_of(block: Any, device: torch.device) -> torch.Tensor:
    """The block's writes.w_o_gram [head, d_head, d_head] on `device`, kept between traces (it
    costs as much as projecting every key through W_O: a twentieth of a decoder's trace at 128
    tokens)."""
    weight = block.w_o.weight
    stamp = (weight.data_ptr(), weight._version, str(device))
    kept = _GRAMS.get(id(weight))
    if kept is not None and kept[0]() is weight and kept[1] == stamp:
        return kept[2]
    gram = w_o_gram(w_o_matrix(block), block.n_heads, device)  # [head, d_head, d_head]
    key = id(weight)
    _GRAMS[key] = (weakref.ref(weight, lambda _, key=key: _GRAMS.pop(key, None)), stamp, gram)
    return gram


def w_o_bias(block: Any) -> torch.Tensor | None:
    """The output projection's bias [d_model], or None."""
    return block.w_o.bias


@dataclass(frozen=True)
class FrozenNorm:
    """A LayerNorm or RMSNorm with its scale frozen at one position: y = P(x) / scale * weight +
    bias, P centring (LayerNorm) or not (RMSNorm). `apply` is the linear part, without the bias."""

    centre: bool
    scale: float | torch.Tensor  # the position's std (LayerNorm) or rms (RMSNorm), eps included;
    # [rows, 1] when frozen at several positions at once
    weight: torch.Tensor  # [d_model] float64 CPU; Gemma's (1 + w) already added
    bias: torch.Tensor | None  # [d_model] float64 CPU

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """The linear part of the frozen norm on any parts of the input. [..., d_model]"""
        x = x.to("cpu", torch.float64)
        if self.centre:
            x = x - x.mean(-1, keepdim=True)
        return x / self.scale * self.weight


def freeze(norm: Any, x: torch.Tensor) -> FrozenNorm:
    """`norm` (nn.LayerNorm, or an RMSNorm of Llama, Gemma, Qwen, Mistral... kind) frozen at the
    input x [d_model] (a float scale), or at each row of x [rows, d_model] (a [rows, 1] scale),
    on the CPU in float64; checked against the module itself (run where it lives, in its dtype),
    so a norm of another kind is refused."""
    x64 = x.detach().to("cpu", torch.float64)
    weight = getattr(norm, "weight", None)
    d = x.shape[-1]
    weight = torch.ones(d, dtype=torch.float64) if weight is None else weight.double().cpu()
    if isinstance(norm, torch.nn.LayerNorm):
        centre, bias = True, None if norm.bias is None else norm.bias.double().cpu()
        scale = (x64.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    else:
        eps = getattr(norm, "variance_epsilon", None)
        eps = getattr(norm, "eps", 1e-6) if eps is None else eps
        centre, bias = False, None
        scale = (x64.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        if type(norm).__name__.startswith("Gemma"):  # Gemma scales by (1 + w)
            weight = 1.0 + weight
    frozen = FrozenNorm(centre, float(scale) if x64.dim() == 1 else scale, weight, bias)
    param = next(norm.parameters(), None)
    where = {} if param is None else {"device": param.device, "dtype": param.dtype}
    with torch.inference_mode():
        want = norm(x.detach().to(**where).unsqueeze(0)).squeeze(0).to("cpu", torch.float64)
    got = frozen.apply(x64) + (0 if bias is None else bias)
    exact = param is None or param.dtype == torch.float32
    rtol = 1e-3 if exact else 3e-2  # a 16-bit norm rounds its output
    if not torch.allclose(got, want, rtol=rtol, atol=rtol * float(want.abs().max()) + 1e-6):
        raise ValueError(
            f"{type(norm).__name__} is neither a LayerNorm nor an RMSNorm that attnviz knows how "
            "to freeze: direct logit attribution is not available for this model"
        )
    return frozen


@dataclass(frozen=True)
class Unembed:
    """logits = factor * (U x + bias), then capped (Gemma's softcap) where `softcap` is set."""

    weight: torch.Tensor  # [vocab, d_model], as the model holds it
    bias: torch.Tensor | None  # [vocab]
    factor: float  # Granite divides its logits by logits_scaling
    softcap: float | None

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        """factor * U x, no bias, no cap, float32 on the weight's device. [..., vocab]"""
        return self.factor * (x.to(self.weight.device, torch.float32) @ self.weight.float().T)

    def row(self, token: int) -> torch.Tensor:
        """factor * U[token]: a residual part's logit is its frozen-normed vector dotted with
        this. [d_model] float64"""
        return self.factor * self.weight[token].double().cpu()

    def bias_logits(self) -> torch.Tensor | None:
        return None if self.bias is None else self.factor * self.bias.double().cpu()

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """What the model computes from its normed final state x. [..., vocab] float32"""
        out = self.linear(x)
        if self.bias is not None:
            out = out + self.factor * self.bias.to(out.device, torch.float32)
        if self.softcap is not None:
            out = torch.tanh(out / self.softcap) * self.softcap
        return out


def needs_head(model: LoadedModel) -> None:
    """Refuse a model without a next-token head, saying why."""
    head = model.model.get_output_embeddings() if model.kind != "encoder" else None
    if head is None:
        raise ValueError(
            f"{model.name!r} is an {model.kind} loaded without a language-model head (attnviz "
            "loads encoders as the bare model, and all-MiniLM-L6-v2 ships none): reading logits "
            "needs a decoder such as attnviz-char-zh-en, GPT-2, Llama, Qwen, Gemma or BART"
        )


def unembedding(model: LoadedModel) -> Unembed:
    """The model's unembedding: its output embeddings, their bias or BART's final_logits_bias,
    Granite's logits_scaling and a final softcap."""
    needs_head(model)
    head = model.model.get_output_embeddings()
    bias = head.bias
    extra = getattr(model.model, "final_logits_bias", None)  # BART: [1, vocab]
    if extra is not None:
        bias = extra.reshape(-1) if bias is None else bias + extra.reshape(-1)
    config = model.model.config
    factor = 1.0 / float(getattr(config, "logits_scaling", 1.0) or 1.0)
    return Unembed(head.weight, bias, factor, getattr(config, "final_logit_softcapping", None))


def _decoder_root(model: LoadedModel) -> Any:
    """The module holding the decoder's layers (BART's decoder, else the base model)."""
    base = model.model.base_model
    return base.decoder if model.kind == "encoder-decoder" else base


def decoder_layers(model: LoadedModel) -> list[Any]:
    """The decoder's layer modules, in order: each reads and returns the residual stream."""
    path = next(p for part, p, _, _ in BLOCK_PATHS[model.model_type] if part == DECODER)
    return list(reduce(getattr, path.split("."), model.model.base_model))


def final_norm(model: LoadedModel) -> Any | None:
    """The norm between the last layer and the unembedding, or None (BART has none)."""
    name = FINAL_NORM.get(model.model_type, "norm")
    return None if name is None else getattr(_decoder_root(model), name)


def embedding_norm(model: LoadedModel) -> Any | None:
    """BART's norm of the embeddings before layer 0; None for every other family."""
    name = POST_LN_EMBEDDING_NORM.get(model.model_type)
    return None if name is None else getattr(_decoder_root(model), name)


def post_ln_norms(model: LoadedModel, layer: Any) -> tuple[Any, ...]:
    """A post-LayerNorm layer's norms in order (BART: after self-attention, cross-attention and
    the MLP); () for the pre-norm families."""
    return tuple(getattr(layer, name) for name in POST_LN_LAYER_NORMS.get(model.model_type, ()))


def attention_out_norm(model: LoadedModel, layer: Any) -> Any | None:
    """The norm applied to an attention block's output before the residual add (Gemma 3, OLMo 2),
    or None."""
    name = ATTENTION_OUT_NORM.get(model.model_type)
    return None if name is None else getattr(layer, name)


def residual_multiplier(model: LoadedModel) -> float:
    """What a block's output is multiplied by before the residual add (Granite), else 1."""
    return float(getattr(model.model.config, "residual_multiplier", 1.0) or 1.0)


def block_of(model: LoadedModel, part: str, layer: int) -> Any:
    """The attention Block of `part` ("decoder" or "cross") at `layer`."""
    found = [b for b in model.blocks if b.part == part and b.layer == layer]
    if not found:
        raise ValueError(f"{model.name!r} has no {part} attention block at layer {layer}")
    return found[0]


WRITING_PARTS = {"decoder": (DECODER,), "encoder-decoder": (DECODER, CROSS)}


def block_output(block, record: Recording, i: int) -> torch.Tensor:
    """Block i's output [batch, n, d_model]: what its W_O module gave in this forward, else
    concat(z) projected again."""
    z = record.layers[i].z  # [batch, head, n, d_head]
    caught = record.outputs.get(id(block.w_o))
    if caught is not None and caught.shape[:2] == (z.shape[0], z.shape[2]):
        return caught
    return w_o_projected(block, z)


def w_o_projected(block, z: torch.Tensor) -> torch.Tensor:
    """The block's output: concat(z) through the model's own W_O, exactly as the model does next."""
    b, h, n, d = z.shape  # [batch, head, n, d_head]
    z_cat = z.transpose(1, 2).reshape(-1, h * d)  # [batch * n, head * d_head]
    w_o = block.w_o
    weight = w_o.weight if type(w_o).__name__ == "Conv1D" else w_o.weight.t()  # [hd, d_model]
    no_bias = w_o.bias is None
    out = z_cat @ weight if no_bias else torch.addmm(w_o.bias, z_cat, weight)  # [batch * n, d]
    return out.view(b, n, -1)  # [batch, n, d_model]
