"""Every UI string in English and Chinese. Pages look strings up by key; no streamlit here."""

from __future__ import annotations

LANGUAGES = {"en": "English", "zh": "中文"}

EXAMPLES = {
    "it → animal": "The animal didn't cross the street because it was too tired",
    "我爱水课": "我爱水课",
    "狗咬人": "狗咬人",
    "人咬狗": "人咬狗",
    "pair: The cat sat. / It was tired.": "The cat sat on the mat.|||It was very tired.",
}

S: dict[str, tuple[str, str]] = {
    # shell
    "app.title": ("attnviz", "attnviz"),
    "app.tagline": (
        "See every number inside attention: Q, K, V, raw scores, scale, mask, softmax weights.",
        "看清注意力里的每一个数：Q、K、V、原始分数、缩放、掩码、softmax 权重。",
    ),
    "nav.playground": ("Playground", "实验场"),
    "nav.bert": ("Pretrained BERT", "预训练 BERT"),
    "nav.steps": ("Step by step", "逐步计算"),
    "nav.why_scale": ("Why √d_k", "为什么除以 √d_k"),
    "nav.multihead": ("Multi-head & cost", "多头与开销"),
    "nav.sharing": ("MHA · MQA · GQA", "MHA · MQA · GQA"),
    "side.language": ("Language / 语言", "Language / 语言"),
    "side.text": ("Sentence", "句子"),
    "side.text_help": (
        "English or Chinese. Each CJK character is one token on the toy stack.",
        "中文或英文。在玩具模型中每个汉字是一个词元。",
    ),
    "side.pair": ("Second sentence (optional)", "第二个句子（可选）"),
    "side.pair_help": (
        "Playground: queries come from the first sentence, keys and values from this one "
        "(cross-attention). BERT: the two are read as a sentence pair.",
        "实验场：查询来自第一句，键和值来自这一句（交叉注意力）。BERT：两句作为句子对输入。",
    ),
    "side.example": ("Examples", "示例"),
    "side.example_pick": ("— pick an example —", "— 选择示例 —"),
    # errors and notices
    "err.empty": (
        "The sentence is empty: type something in the sidebar.",
        "句子为空：请在侧边栏输入内容。",
    ),
    "err.config": ("These settings do not fit together: {msg}", "这些设置无法同时成立：{msg}"),
    "warn.truncated": (
        "The text has {n} tokens; only the first {limit} are shown.",
        "文本有 {n} 个词元，只显示前 {limit} 个。",
    ),
    # playground controls
    "pg.title": ("Playground: a configurable attention stack", "实验场：可配置的注意力模型"),
    "pg.intro": (
        "A small multi-head attention stack with random (seeded) weights. Change the number of heads, "
        "the head size d_k or the scaling and watch every head's softmax weights change.",
        "一个权重随机（固定种子）的小型多头注意力模型。改变头数、每头维度 d_k 或缩放，"
        "观察每个头的 softmax 权重如何变化。",
    ),
    "pg.d_model": ("d_model", "d_model"),
    "pg.heads": ("Heads h", "头数 h"),
    "pg.heads_help": (
        "Only values that divide d_model are offered (unless d_k is set by hand).",
        "只提供能整除 d_model 的值（除非手动设置 d_k）。",
    ),
    "pg.d_head_auto": ("d_k = d_model / h", "d_k = d_model / h"),
    "pg.d_head": ("d_k (per head)", "每头维度 d_k"),
    "pg.kv_heads": ("K/V heads (1 = MQA, h = MHA)", "K/V 头数（1 = MQA，h = MHA）"),
    "pg.layers": ("Layers", "层数"),
    "pg.scale": ("÷ √d_k", "÷ √d_k"),
    "pg.scale_help": (
        "Off: the raw q·k go into softmax; with a large d_k it saturates (one weight near 1).",
        "关闭：原始 q·k 直接进入 softmax；d_k 较大时会饱和（一个权重接近 1）。",
    ),
    "pg.temperature": ("Temperature", "温度"),
    "pg.causal": ("Causal mask", "因果掩码"),
    "pg.positional": ("Positional encoding", "位置编码"),
    "pg.add_norm": ("Add & Norm", "残差与层归一化"),
    "pg.ffn": ("Feed-forward", "前馈网络"),
    "pg.share": ("Share weights across layers", "跨层共享权重"),
    "pg.seed": ("Seed", "随机种子"),
    "pg.layer": ("Layer", "层"),
    "pg.heads_caption": (
        "{h} heads · d_k = {dk} · scale = {scale:.4f} · {sharing}",
        "{h} 个头 · d_k = {dk} · 缩放 = {scale:.4f} · {sharing}",
    ),
    "pg.head_title": ("head {h}", "头 {h}"),
    "pg.positional_help": (
        "none: the stack cannot tell word order (狗咬人 and 人咬狗 get the same vectors, permuted).",
        "none：模型看不到词序（“狗咬人”和“人咬狗”得到相同的向量，只是顺序不同）。",
    ),
    # common view words
    "w.weights": ("softmax weights", "softmax 权重"),
    "w.scores": ("raw scores q·k", "原始分数 q·k"),
    "w.logits": ("logits (scaled, masked)", "logits（缩放、掩码后）"),
    "w.query": ("query", "查询"),
    "w.key": ("key", "键"),
}


def translate(key: str, lang: str = "en", **fmt: object) -> str:
    """The string for `key` in `lang`; a missing key shows itself so it is easy to spot."""
    pair = S.get(key)
    if pair is None:
        return key
    text = pair[1] if lang == "zh" else pair[0]
    return text.format(**fmt) if fmt else text
