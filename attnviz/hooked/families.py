"""What differs between model families: which ones attnviz traces and where their parts are."""

from __future__ import annotations

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
