"""A tiny GGUF file written here (gguf's GGUFWriter): a 2-layer Llama with random weights, some
quantised to Q8_0, and a byte-level BPE vocabulary (the 256 byte characters and a few merges).
It converts in about a second, so the cache's mechanics are tested without the registry models."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnviz.engine.hooked.labels import _byte_alphabet

D, HEADS, KV, FF, LAYERS = 64, 4, 2, 128, 2
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("a", "t"), ("Ġ", "c"), ("Ġc", "at")]


def vocabulary() -> tuple[list[str], list[str]]:
    """(tokens, merges): the byte alphabet in byte order, then one token per merge."""
    alphabet = {b: c for c, b in _byte_alphabet().items()}
    tokens = [alphabet[b] for b in range(256)] + ["".join(m) for m in MERGES]
    return tokens + ["<s>", "</s>"], [" ".join(m) for m in MERGES]


def write(path: Path, architecture: str = "llama", seed: int = 0, q8: bool = True) -> Path:
    """Write the tiny model to `path` (a .gguf file) and return it."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, merges = vocabulary()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("attnviz tiny test model")
    w.add_block_count(LAYERS)
    w.add_context_length(128)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(D // HEADS)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (vocab - 2) + [3, 3])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab - 2)
    w.add_eos_token_id(vocab - 1)

    def tensor(name: str, *shape: int, quantise: bool = True) -> None:
        data = (rng.standard_normal(shape) * 0.2).astype(np.float32)  # numpy order: outer first
        if q8 and quantise and shape[-1] % 32 == 0 and len(shape) == 2:
            packed = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(
                name, packed, raw_shape=packed.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0
            )
        else:
            w.add_tensor(name, data)

    tensor("token_embd.weight", vocab, D, quantise=False)
    tensor("output_norm.weight", D, quantise=False)
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", D, quantise=False)
        tensor(f"blk.{i}.attn_q.weight", D, D)
        tensor(f"blk.{i}.attn_k.weight", KV * D // HEADS, D)
        tensor(f"blk.{i}.attn_v.weight", KV * D // HEADS, D)
        tensor(f"blk.{i}.attn_output.weight", D, D)
        tensor(f"blk.{i}.ffn_norm.weight", D, quantise=False)
        tensor(f"blk.{i}.ffn_gate.weight", FF, D)
        tensor(f"blk.{i}.ffn_up.weight", FF, D)
        tensor(f"blk.{i}.ffn_down.weight", D, FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
