"""Tiny Llamas whose answer is known by construction, for tests/test_reproduce.py: a planted
attention sink, and a planted head the second copy's prediction relies on. They read the bundled
character model's tokenizer (one token a character, [BOS] first)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from attnviz.engine.bundled import trained_folder
from attnviz.engine.hooked import load_model

N_LAYERS, N_HEADS, N_KV, D_HEAD, D_MODEL = 2, 4, 2, 8, 32
SLOW = D_HEAD // 2 - 1  # the rotary pair (SLOW, SLOW + 4) turns by 1e-9 rad a position: none
MARK, CONST = 1, 0  # embedding dims: [BOS]'s marker, and a constant every token has
SINK = (0, 0)  # the planted sink head
CARRIER = (1, 2)  # the planted head the prediction relies on


def tokenizer():
    return AutoTokenizer.from_pretrained(trained_folder("attnviz-char-zh-en"))


def _config(vocab: int) -> LlamaConfig:
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=D_MODEL, intermediate_size=16, num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS, num_key_value_heads=N_KV, head_dim=D_HEAD,
        max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    config.rope_parameters = {"rope_type": "default", "rope_theta": 1e12}
    return config


def _embeddings(model, tok, gen: torch.Generator) -> None:
    emb = model.model.embed_tokens.weight  # [vocab, d_model]
    emb.copy_(0.3 * torch.randn(emb.shape, generator=gen))
    emb[:, MARK] = 0.0
    emb[:, CONST] = 1.0
    emb[tok.bos_token_id, MARK] = 10.0
    emb[tok.bos_token_id, 2:] = 0.0


def build(folder, sink: bool = True, carrier: bool = False):
    """A tiny Llama saved in `folder` and loaded by attnviz. `sink`: head SINK's query reads
    the constant dim and its key [BOS]'s marker (in the rotary pair that does not turn), so it
    puts ~all its weight on token 0; [BOS]'s value is 0. Otherwise every query is 0 (uniform
    attention). `carrier`: every head's W_O is 0 but CARRIER's, which writes a constant that
    raises the logits of the lowercase letters and the space: silencing it hurts their loss,
    silencing any other head changes nothing."""
    tok = tokenizer()
    model = AutoModelForCausalLM.from_config(_config(len(tok)))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        _embeddings(model, tok, gen)
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.zero_()  # no MLP: attention alone writes
            layer.self_attn.q_proj.weight.zero_()
            layer.self_attn.v_proj.weight[:, :2] = 0.0  # [BOS]'s value is 0
        if sink:
            la, h = SINK
            attn = model.model.layers[la].self_attn
            attn.q_proj.weight[h * D_HEAD + SLOW, CONST] = 3.0
            attn.k_proj.weight[:, MARK] = 0.0
            attn.k_proj.weight[(h * N_KV // N_HEADS) * D_HEAD + SLOW, MARK] = 3.0
        if carrier:
            _plant_carrier(model, tok)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def _plant_carrier(model, tok) -> None:
    la, h = CARRIER
    for i, layer in enumerate(model.model.layers):
        layer.self_attn.o_proj.weight.zero_()
        if i == la:
            v = layer.self_attn.v_proj.weight  # [n_kv * d_head, d_model]
            v[(h * N_KV // N_HEADS) * D_HEAD, CONST] = 1.0  # the value's dim 0: the constant
            layer.self_attn.o_proj.weight[D_MODEL - 1, h * D_HEAD] = 8.0  # written to the last dim
    head = model.lm_head.weight  # [vocab, d_model]
    head[:, D_MODEL - 1] = 0.0
    for c in "abcdefghijklmnopqrstuvwxyz ":
        ids = tok.convert_tokens_to_ids([c])
        if ids and ids[0] != tok.unk_token_id:
            head[ids[0], D_MODEL - 1] = 1.0


def twice(folder, **planted):
    """The planted model (`build(folder, **planted)`) through attnviz and through Hugging Face's
    eager attention (the tests' oracle)."""
    model = build(folder, **planted)
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    return model, eager
