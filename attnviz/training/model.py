"""The decoder attnviz trains: a Llama (RoPE, GQA, RMSNorm, SwiGLU) built from transformers'
LlamaConfig, so the saved folder loads with load_model like any Llama, and every view works."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from attnviz.training.chars import BOS, EOS, PAD


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on besides the text: same config + same text = same weights
    (on the same kind of device, with deterministic kernels)."""

    vocab_size: int = 3000  # [PAD] [UNK] [BOS] [EOS] and the most frequent characters
    d_model: int = 256  # hidden size
    n_layers: int = 4
    n_heads: int = 8  # query heads
    n_kv_heads: int = 2  # key/value heads (GQA: 4 query heads share one)
    d_ff: int = 512  # SwiGLU inner width
    context: int = 256  # tokens per training window, [BOS] included; the model's max length
    rope_theta: float = 10000.0
    steps: int = 200
    batch: int = 16  # windows per step
    lr: float = 3e-3  # peak, after a linear warm-up, then cosine down to lr / 10
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    # How often each stream is drawn: poems hold the line structure, sayings the modern Chinese.
    mix: tuple[tuple[str, float], ...] = (("poems", 0.3), ("chinese", 0.3), ("english", 0.4))
    eval_every: int = 40
    eval_windows: int = 16  # validation windows per stream, fixed by the seed

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}")
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} does not divide d_model={self.d_model}")
        if self.context < 8 or self.steps < 1 or self.batch < 1:
            raise ValueError("context must be at least 8 tokens, steps and batch at least 1")

    def record(self) -> dict:
        return asdict(self)


def build(cfg: TrainConfig):
    """A freshly initialised LlamaForCausalLM (seeded by the caller) with tied embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.context,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=True,  # halves the file: the vocabulary is most of a small model
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attention_dropout=0.0,
    )
    return LlamaForCausalLM(config)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
