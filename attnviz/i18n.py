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
    "pg.title": ("Playground", "实验场"),
    "pg.intro": (
        "A configurable multi-head attention stack with random (seeded) weights. Change the number of heads, "
        "the head size d_k or the scaling and watch every head's softmax weights change.",
        "一个可配置、权重随机（固定种子）的多头注意力模型。改变头数、每头维度 d_k 或缩放，"
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
    # explorer views
    "ex.view": ("View", "视图"),
    "ex.view.heads": ("All heads", "所有头"),
    "ex.view.overview": ("Overview", "总览"),
    "ex.view.detail": ("Head detail", "单头详情"),
    "ex.view.query": ("One query, in numbers", "单个查询的数值"),
    "ex.view.outputs": ("Outputs", "输出"),
    "ex.view.link": ("Link two tokens", "连接两个词元"),
    "ex.link_key": ("Key token", "键词元"),
    "ex.link_title": ("Weight from “{q}” to “{k}” in every head", "每个头中“{q}”对“{k}”的权重"),
    "ex.link_help": (
        "The heads ranked by how much of the query's attention lands on the key; a uniform head would give {u:.3f}.",
        "按查询落在该键上的注意力排序；均匀分布的头会给出 {u:.3f}。",
    ),
    "ex.link_open": (
        "Open layer {l}, head {h} in Head detail",
        "在单头详情中打开第 {l} 层第 {h} 个头",
    ),
    "ex.view.stats": ("Head statistics", "头统计"),
    "ex.head": ("Head", "头"),
    "ex.query": ("Query token", "查询词元"),
    "ex.shared_scale": ("One colour scale for all heads", "所有头共用一个色标"),
    "ex.shared_help": (
        "On: colours compare across heads. Off: each head uses its own range, so faint patterns show.",
        "开：颜色可在头之间比较。关：每个头用自己的范围，弱模式也能看清。",
    ),
    "ex.overview_title": ("Every layer × head (softmax weights)", "所有层 × 头（softmax 权重）"),
    "ex.overview_help": (
        "Rows are layers, columns heads; each thumbnail is one head's query × key weights. "
        "Click a thumbnail (or use the sliders) to see that head in full below.",
        "行是层，列是头；每个缩略图是一个头的查询 × 键权重。点击缩略图（或拖动滑块），下方显示该头的完整矩阵。",
    ),
    "ex.detail_help": (
        "Left: raw q·k. Middle: what softmax sees, q·k × scale with masked cells blank (−∞). "
        "Right: the softmax weights; each row sums to 1.",
        "左：原始 q·k。中：softmax 的输入，q·k × 缩放，被掩码的格子为空（−∞）。右：softmax 权重，每行和为 1。",
    ),
    "ex.query_formula": (
        "weight(key j) = exp(q·k_j × {scale:.4g} − max) / Σ exp(…)  — subtracting the max changes nothing but avoids overflow.",
        "权重(键 j) = exp(q·k_j × {scale:.4g} − max) / Σ exp(…)  —— 减去最大值不改变结果，只是避免溢出。",
    ),
    "ex.query_bars": ("Where “{token}” looks", "“{token}” 关注哪里"),
    "ex.q_vector": ("q, the query vector", "查询向量 q"),
    "ex.qk_products": (
        "q_i × k_i for every key (row sum = q·k)",
        "每个键的 q_i × k_i（行和 = q·k）",
    ),
    "ex.qk_help": (
        "Each row is one key: the products of its components with the query's; their sum is the score. This head reads key/value head {kv}.",
        "每一行是一个键：它与查询各分量的乘积，求和就是分数。这个头使用第 {kv} 个键/值头。",
    ),
    "ex.z_title": ("z of head {h} = weights @ V", "头 {h} 的 z = 权重 @ V"),
    "ex.output_title": ("Block output: concat(z) @ W_O", "模块输出：concat(z) @ W_O"),
    "ex.outputs_help": (
        "z is each head's weighted average of value vectors; the heads are concatenated and W_O mixes them back to d_model.",
        "z 是每个头对值向量的加权平均；各头拼接后由 W_O 混合回 d_model 维。",
    ),
    "ex.stats_help": (
        "Per head, averaged over queries: entropy (nats; rel = 1 is uniform), max weight, mean distance |i − j|, and the share of weight on itself, the previous token, the first token and special tokens. Click a column to sort.",
        "每个头在所有查询上的平均：熵（nats；rel = 1 为均匀）、最大权重、平均距离 |i − j|，以及落在自身、前一个词元、第一个词元和特殊词元上的权重。点击列名排序。",
    ),
    "ex.gauge_max": ("mean max weight", "平均最大权重"),
    "ex.gauge_entropy": ("entropy / uniform", "熵 / 均匀分布的熵"),
    "ex.gauge_help": (
        "With {n} keys a uniform row has max weight {uniform:.3f} and relative entropy 1; a saturated softmax has max weight near 1 and entropy near 0.",
        "有 {n} 个键时，均匀分布的最大权重为 {uniform:.3f}、相对熵为 1；饱和的 softmax 最大权重接近 1、熵接近 0。",
    ),
    "ex.csv_matrix": ("Download this matrix (CSV)", "下载此矩阵（CSV）"),
    "ex.csv_stats": ("Download the table (CSV)", "下载此表（CSV）"),
    "ex.json_trace": ("Download the whole trace (JSON)", "下载完整追踪（JSON）"),
    # step by step
    "st.title": ("Step by step: attention in four steps", "逐步计算：注意力的四个步骤"),
    "st.intro": (
        "One attention head on a tiny example, every number shown. Each token's vector x (an embedding plus its position) is multiplied by three weight matrices to get its query q, key k and value v. Then: (1) every query is compared with every key by a dot product, (2) the scores are divided by √d_k, (3) softmax turns each row into weights that sum to 1, (4) each output is the weighted average of the values.",
        "在一个很小的例子上演示一个注意力头，显示每一个数。每个词元的向量 x（词嵌入加位置编码）分别乘以三个权重矩阵，得到查询 q、键 k 和值 v。然后：(1) 每个查询与每个键做点积，(2) 分数除以 √d_k，(3) softmax 把每一行变成和为 1 的权重，(4) 每个输出是值向量的加权平均。",
    ),
    "st.own_text": (
        "Use the sidebar sentence instead of 我爱水课",
        "使用侧边栏的句子代替“我爱水课”",
    ),
    "st.truncated": (
        "Your sentence has {n} tokens; the walkthrough uses the first {k} so every number fits.",
        "你的句子有 {n} 个词元；为了让每个数都放得下，这里只用前 {k} 个。",
    ),
    "st.d_k": ("d_k (= d_model here)", "d_k（这里等于 d_model）"),
    "st.query": ("Follow the query", "跟踪查询"),
    "st.prev": ("◀ Previous step", "◀ 上一步"),
    "st.next": ("Next step ▶", "下一步 ▶"),
    "st.step_of": ("Step {i} of 4", "第 {i} 步，共 4 步"),
    "st.inputs": ("Inputs: X and the projections", "输入：X 与三个投影"),
    "st.inputs_help": (
        "X has one row per token. Q = X W_q, K = X W_k, V = X W_v: shapes [{n}×{d}]·[{d}×{d}] → [{n}×{d}].",
        "X 每行是一个词元。Q = X W_q，K = X W_k，V = X W_v：形状 [{n}×{d}]·[{d}×{d}] → [{n}×{d}]。",
    ),
    "st.step.scores": ("1 · Scores: every query against every key", "1 · 分数：每个查询与每个键"),
    "st.step.scaled": ("2 · Divide by √d_k", "2 · 除以 √d_k"),
    "st.step.weights": ("3 · Softmax over each row", "3 · 对每一行做 softmax"),
    "st.step.z": ("4 · Weighted sum of the values", "4 · 对值向量加权求和"),
    "st.explain.scores": (
        "Row i holds q_i · k_j for every key j: how well token i's question matches token j's label. Shapes: [{n}×{d}]·[{d}×{n}] → [{n}×{n}].",
        "第 i 行是 q_i · k_j（对所有键 j）：词元 i 的“问题”与词元 j 的“标签”有多匹配。形状：[{n}×{d}]·[{d}×{n}] → [{n}×{n}]。",
    ),
    "st.explain.scaled": (
        "With unit-variance components, q·k has variance d_k (here {d}), so scores grow with d_k. Multiplying by {scale:.4g} = 1/√{d} brings the variance back to 1 and keeps softmax out of saturation.",
        "当各分量方差为 1 时，q·k 的方差是 d_k（这里是 {d}），分数随 d_k 变大。乘以 {scale:.4g} = 1/√{d} 把方差拉回 1，避免 softmax 饱和。",
    ),
    "st.explain.scaled_off": (
        "Scaling is off: the scores go into softmax as they are (scale = 1).",
        "缩放已关闭：分数原样进入 softmax（缩放系数 = 1）。",
    ),
    "st.explain.weights": (
        "softmax(x)_j = exp(x_j) / Σ_k exp(x_k), along each row: every row of weights sums to 1. Masked cells (−∞) get weight exactly 0.",
        "softmax(x)_j = exp(x_j) / Σ_k exp(x_k)，按行计算：每一行权重之和为 1。被掩码的格子（−∞）权重恰好为 0。",
    ),
    "st.explain.z": (
        "z_i = Σ_j weight_ij · v_j: token i's output mixes the values of the tokens it attends to. Shapes: [{n}×{n}]·[{n}×{d}] → [{n}×{d}].",
        "z_i = Σ_j 权重_ij · v_j：词元 i 的输出混合了它关注的词元的值向量。形状：[{n}×{n}]·[{n}×{d}] → [{n}×{d}]。",
    ),
    "st.row_caption": ("Row of “{token}”: {values}", "“{token}” 这一行：{values}"),
    "st.columns_title": ("Note 001's column form: A = KᵀQ", "笔记 001 的列向量形式：A = KᵀQ"),
    "st.columns_help": (
        "Note 001 stores tokens as columns, so it writes A = KᵀQ (keys down the rows, queries across) and applies softmax down each column. It is the transpose of QKᵀ, and the weights agree: the largest difference here is {diff:.2e}.",
        "笔记 001 把词元作为列向量，因此写成 A = KᵀQ（行是键，列是查询），并沿每一列做 softmax。它正是 QKᵀ 的转置，得到的权重相同：这里的最大差异为 {diff:.2e}。",
    ),
    # MHA / MQA / GQA
    "sh.title": ("MHA · MQA · GQA: sharing keys and values", "MHA · MQA · GQA：共享键和值"),
    "sh.intro": (
        "Every query head has its own W_q. In multi-head attention (MHA) each head also has its own keys and values. Multi-query attention (MQA) gives all heads one shared K and V; grouped-query attention (GQA) sits in between: heads in a group share one K/V head. Fewer K/V heads mean fewer parameters and a smaller KV cache when generating text, at some cost in quality.",
        "每个查询头都有自己的 W_q。多头注意力（MHA）中每个头也有自己的键和值；多查询注意力（MQA）让所有头共享一组 K 和 V；分组查询注意力（GQA）介于两者之间：同一组的头共享一个 K/V 头。K/V 头越少，参数越少，生成文本时的 KV 缓存越小，但质量可能略有下降。",
    ),
    "sh.kv": ("K/V heads", "K/V 头数"),
    "sh.mode": (
        "This is {mode}: {h} query heads read {kv} K/V heads, {g} per group.",
        "当前是 {mode}：{h} 个查询头读取 {kv} 个 K/V 头，每组 {g} 个。",
    ),
    "sh.rule": (
        "Query head h reads K/V head h // (n_heads / n_kv_heads) — PyTorch's rule (scaled_dot_product_attention with enable_gqa). Note 003's split_head code does not run: it indexes a 3-D tensor with five indices and reshapes the groups in the wrong order.",
        "查询头 h 读取第 h // (n_heads / n_kv_heads) 个 K/V 头——这是 PyTorch 的约定（scaled_dot_product_attention 的 enable_gqa）。笔记 003 的 split_head 代码无法运行：它用五个下标索引三维张量，并以错误的顺序重排分组。",
    ),
    "sh.keys": ("The keys each group shares (K per K/V head)", "每组共享的键（每个 K/V 头的 K）"),
    "sh.k_title": ("K of KV{g} (query heads {heads})", "KV{g} 的 K（查询头 {heads}）"),
    "sh.check": ("Live check on your sentence", "在你的句子上实时验证"),
    "sh.check_tied": ("GQA = MHA with K/V copied per group", "GQA = 每组复制 K/V 的 MHA"),
    "sh.check_all": ("GQA with h groups = MHA", "h 组的 GQA = MHA"),
    "sh.check_one": ("GQA with 1 group = MQA", "1 组的 GQA = MQA"),
    "sh.check_help": (
        "Largest difference between the two outputs. Anything below about 1e-5 is float32 rounding (the sums run in a different order), so each pair computes the same thing.",
        "两个输出之间的最大差异。低于约 1e-5 的差异来自 float32 舍入（求和顺序不同），所以每一对计算的是同一件事。",
    ),
    "sh.row.q": ("Q", "Q 的处理"),
    "sh.row.k": ("K", "K 的处理"),
    "sh.row.v": ("V", "V 的处理"),
    "sh.row.kv_heads": ("K/V heads", "K/V 头数"),
    "sh.row.params": (
        "parameters of one layer (W_q, W_k, W_v, W_O)",
        "一层的参数量（W_q、W_k、W_v、W_O）",
    ),
    "sh.row.kv_params": ("of which W_k + W_v", "其中 W_k + W_v"),
    "sh.row.cache": ("KV cache per layer, {n} tokens, fp16", "每层 KV 缓存，{n} 个词元，fp16"),
    "sh.row.flex": ("flexibility", "灵活性"),
    "sh.row.use": ("typical use", "适用场景"),
    "sh.own": ("own per head", "每个头独立"),
    "sh.shared_all": ("shared by all heads", "所有头共享"),
    "sh.shared_group": ("shared within a group", "每组共享"),
    "sh.flex.mha": ("most expressive", "最强"),
    "sh.flex.mqa": ("least", "最弱"),
    "sh.flex.gqa": ("tunable with G", "随 G 可调"),
    "sh.use.mha": ("quality first; largest cache", "表达能力强，但缓存最大"),
    "sh.use.mqa": (
        "fast decoding, smallest cache; some quality loss",
        "解码最快、缓存最小；质量可能下降",
    ),
    "sh.use.gqa": ("the usual compromise in recent LLMs", "近来大模型常用的折中方案"),
    "sh.table": (
        "The comparison, with the numbers of this configuration",
        "对比表（使用当前配置的数值）",
    ),
    # BERT page
    "bert.title": ("Pretrained BERT", "预训练 BERT"),
    "bert.intro": (
        "A real pretrained encoder with its attention intercepted: every head's q, k, v, raw scores, weights and outputs, exactly as the model computes them. The default is all-MiniLM-L6-v2 (6 layers × 12 heads), bundled so it works offline; its vocabulary is English, so Chinese characters mostly become [UNK] — load bert-base-chinese from a folder for Chinese.",
        "一个真实的预训练编码器，其注意力被截获：每个头的 q、k、v、原始分数、权重和输出，与模型的计算完全一致。默认模型是 all-MiniLM-L6-v2（6 层 × 12 个头），随软件包提供，离线可用；它的词表是英文的，中文字符大多会变成 [UNK]——如需中文，请从本地文件夹加载 bert-base-chinese。",
    ),
    "bert.model": (
        "Model (blank = bundled all-MiniLM-L6-v2)",
        "模型（留空 = 内置 all-MiniLM-L6-v2）",
    ),
    "bert.model_help": (
        "A Hugging Face id (needs the model in the local cache or a network) or a folder with config.json, the weights and the tokenizer files. Remote code is never run.",
        "Hugging Face 模型名（需要本地缓存或网络）或包含 config.json、权重和分词器文件的文件夹。从不运行远程代码。",
    ),
    "bert.device": ("Device", "设备"),
    "bert.bundled": ("the bundled all-MiniLM-L6-v2", "内置的 all-MiniLM-L6-v2"),
    "bert.loading": ("Loading {name}…", "正在加载 {name}…"),
    "bert.loaded": ("{name} on {device}", "{name}，运行于 {device}"),
    "bert.load_failed": ("Could not load {name}: {msg}", "无法加载 {name}：{msg}"),
    "bert.tokens": ("{n} tokens: {tokens}", "{n} 个词元：{tokens}"),
    "bert.whatif": ("What if…", "如果……"),
    "bert.whatif_help": (
        "Change the model for this trace only, then compare with the unchanged model: the heads whose weights moved most, one head's difference, and how far the sentence embedding moved.",
        "只对这次计算修改模型，再与未修改的模型比较：权重变化最大的头、某个头的差异，以及句向量移动了多少。",
    ),
    "bert.ablate": ("Silence heads (z set to 0 before W_O)", "屏蔽头（在 W_O 之前把 z 置 0）"),
    "bert.mask": (
        "Hide tokens (no query may attend to them)",
        "隐藏词元（任何查询都不能关注它们）",
    ),
    "bert.cosine": (
        "Sentence embedding cosine to the unchanged model",
        "与未修改模型的句向量余弦相似度",
    ),
    "bert.shift_title": (
        "How far each head's weights moved (0 = unchanged, 1 = disjoint)",
        "每个头的权重移动了多少（0 = 不变，1 = 完全不同）",
    ),
    "bert.diff_title": (
        "Layer {l}, head {h}: weights − unchanged weights",
        "第 {l} 层第 {h} 个头：权重 − 未修改时的权重",
    ),
    "bert.diff_layer": ("Layer to compare", "比较的层"),
    "bert.diff_head": ("Head to compare", "比较的头"),
    "bert.no_change": (
        "All knobs are at their defaults: the trace is the model's own.",
        "所有开关都是默认值：显示的是模型本来的计算。",
    ),
    "bert.unk": (
        "{n} of the tokens are [UNK]: this model's vocabulary does not know them.",
        "有 {n} 个词元是 [UNK]：这个模型的词表不认识它们。",
    ),
    # why sqrt(d_k)
    "ws.title": ("Why divide by √d_k?", "为什么要除以 √d_k？"),
    "ws.intro": (
        "If the components of q and k are independent with mean 0 and variance 1, their dot product q·k = Σ q_i k_i is a sum of d_k terms of variance 1, so its variance is d_k and its typical size √d_k (8 when d_k = 64). Large logits push softmax to put almost all weight on one key; then its gradient nearly vanishes and learning stalls. Dividing by √d_k brings the variance back to 1 at every d_k. Below, every number is measured on random vectors, live.",
        "如果 q 和 k 的各分量独立、均值为 0、方差为 1，那么点积 q·k = Σ q_i k_i 是 d_k 个方差为 1 的项之和，方差为 d_k，典型大小为 √d_k（d_k = 64 时为 8）。过大的 logits 会让 softmax 几乎把全部权重放在一个键上；这时梯度几乎消失，学习停滞。除以 √d_k 能让方差在任何 d_k 下都回到 1。下面的每个数字都是在随机向量上实时测得的。",
    ),
    "ws.var_title": ("Variance of q·k against d_k", "q·k 的方差随 d_k 的变化"),
    "ws.var_measured": ("Var(q·k), measured", "Var(q·k)，实测"),
    "ws.var_theory": ("theory: d_k", "理论：d_k"),
    "ws.var_scaled": ("Var(q·k / √d_k), measured", "Var(q·k / √d_k)，实测"),
    "ws.var_one": ("theory: 1", "理论：1"),
    "ws.var_metric": ("At d_k = 64: Var(q·k) / d_k", "d_k = 64 时：Var(q·k) / d_k"),
    "ws.std_metric": ("At d_k = 64: std of q·k (theory 8)", "d_k = 64 时：q·k 的标准差（理论 8）"),
    "ws.sat_title": (
        "Softmax over {n} keys: mean max weight",
        "{n} 个键上的 softmax：平均最大权重",
    ),
    "ws.ent_title": (
        "Mean entropy (nats; uniform = {u:.2f})",
        "平均熵（nats；均匀分布 = {u:.2f}）",
    ),
    "ws.jac_title": (
        "Size of the softmax gradient ‖diag(p) − p pᵀ‖",
        "softmax 梯度的大小 ‖diag(p) − p pᵀ‖",
    ),
    "ws.jac_help": (
        "Every gradient that reaches the scores passes through this Jacobian. Unscaled, it shrinks towards 0 as d_k grows: the softmax is saturated and barely learns. Scaled, it stays put.",
        "所有传到分数上的梯度都要经过这个雅可比矩阵。不缩放时，随着 d_k 增大它趋近于 0：softmax 饱和，几乎学不动。缩放后它保持稳定。",
    ),
    "ws.scaled": ("scaled (÷ √d_k)", "缩放（÷ √d_k）"),
    "ws.unscaled": ("unscaled", "不缩放"),
    "ws.live": ("On your sentence", "在你的句子上"),
    "ws.live_dk": ("d_k", "d_k"),
    "ws.live_help": (
        "One head with d_k = {d}: the same q and k, with and without the scale. Mean max weight: {on:.3f} scaled, {off:.3f} unscaled.",
        "一个 d_k = {d} 的头：相同的 q 和 k，分别缩放和不缩放。平均最大权重：缩放 {on:.3f}，不缩放 {off:.3f}。",
    ),
    # multi-head and its cost
    "mh.title": ("Multi-head attention and what it costs", "多头注意力及其开销"),
    "mh.intro": (
        "Multi-head attention splits d_model into h heads of d_k = d_model / h. Each head has its own W_q, W_k, W_v, attends on its own, and produces an n × d_v output; the heads are concatenated (torch.cat) back to n × h·d_v and W_O mixes them into d_model. With h·d_k = d_model, h heads cost about the same as one full-width head: the same matrices, cut into slices.",
        "多头注意力把 d_model 分成 h 个头，每个头 d_k = d_model / h。每个头有自己的 W_q、W_k、W_v，独立计算注意力，输出 n × d_v；各头拼接（torch.cat）回 n × h·d_v，再由 W_O 混合回 d_model。当 h·d_k = d_model 时，h 个头的开销与一个全宽的头大致相同：矩阵一样大，只是被切成了片。",
    ),
    "mh.shapes": (
        "The shapes, for this configuration and your {n} tokens",
        "当前配置和你的 {n} 个词元下的形状",
    ),
    "mh.heads_z": ("Each head's output z (n × d_v)", "每个头的输出 z（n × d_v）"),
    "mh.concat": ("Concat(head_1 … head_h)", "拼接（head_1 … head_h）"),
    "mh.output": ("· W_O = output", "· W_O = 输出"),
    "mh.params": ("Parameter calculator", "参数计算器"),
    "mh.params_help": (
        "Note 001 counts a single head with d_k = d_model and no W_O: 3·d². Multi-head adds W_O: 4·d², whatever h is, because the h slices of W_q together are still d × d. Sharing K/V (MQA/GQA) shrinks W_k and W_v.",
        "笔记 001 计算单头（d_k = d_model，没有 W_O）：3·d²。多头加上 W_O：4·d²，与 h 无关，因为 h 片 W_q 合起来仍是 d × d。共享 K/V（MQA/GQA）会缩小 W_k 和 W_v。",
    ),
    "mh.col.layer": ("attention layer", "注意力层"),
    "mh.col.params": ("parameters", "参数量"),
    "mh.col.in_d2": ("in units of d_model²", "以 d_model² 为单位"),
    "mh.row.single": (
        "single head, d_k = d_model, no W_O (note 001)",
        "单头，d_k = d_model，无 W_O（笔记 001）",
    ),
    "mh.row.multi": ("multi-head, {h} heads, with W_O", "多头，{h} 个头，含 W_O"),
    "mh.row.gqa": ("GQA, {kv} K/V heads", "GQA，{kv} 个 K/V 头"),
    "mh.row.mqa": ("MQA, 1 K/V head", "MQA，1 个 K/V 头"),
    "mh.transformer": (
        "A whole Transformer (encoder-decoder, shared embeddings)",
        "完整的 Transformer（编码器-解码器，共享词嵌入）",
    ),
    "mh.total": ("Total: {m:.1f} M parameters", "总计：{m:.1f} M 参数"),
    "mh.kv": ("KV cache when generating", "生成时的 KV 缓存"),
    "mh.kv_help": (
        "A decoder keeps every past token's K and V in each layer: 2 · layers · K/V heads · d_k · tokens · batch · bytes. That is what MQA and GQA shrink.",
        "解码器在每一层保存所有已生成词元的 K 和 V：2 · 层数 · K/V 头数 · d_k · 词元数 · 批大小 · 字节数。MQA 和 GQA 缩小的正是它。",
    ),
    "mh.seq": ("Sequence length", "序列长度"),
    "mh.batch": ("Batch", "批大小"),
    "mh.bytes": ("Bytes per value (2 = fp16)", "每个数的字节数（2 = fp16）"),
    "mh.col.kind": ("attention", "注意力"),
    "mh.col.kv_heads": ("K/V heads", "K/V 头数"),
    "mh.col.per_token": ("per token", "每个词元"),
    "mh.col.total": ("for this length and batch", "此长度与批大小"),
    "mh.table3": (
        "Table 3 of “Attention Is All You Need”, from the calculator",
        "用计算器复现《Attention Is All You Need》表 3",
    ),
    "mh.table3_help": (
        "The paper's params column next to the calculator's count with its shared vocabulary of about 37,000 tokens. Rows A keep h·d_k = 512, so every matrix keeps its size: the paper leaves them blank and the count equals the base model's. The gap of about 2 M in every d_model = 512 row (6.5 % of the small N = 2 model) sits outside the layers, most likely a vocabulary a little larger than 37,000.",
        "论文的参数列与计算器结果并排（共享词表约 37,000 个词元）。A 组保持 h·d_k = 512，每个矩阵大小不变：论文此处留空，计数与基础模型相同。每个 d_model = 512 的行都差约 2 M（在 N = 2 的小模型上占 6.5%），差异在层之外，很可能是词表略大于 37,000。",
    ),
    "mh.flops": ("h heads ≈ one full-width head (note 004)", "h 个头 ≈ 一个全宽的头（笔记 004）"),
    "mh.flops_help": (
        "Multiply-adds of one layer on your {n} tokens. Every matrix product is the same; only the softmax (one exp per weight) grows with h.",
        "在你的 {n} 个词元上一层的乘加次数。每个矩阵乘法都相同；只有 softmax（每个权重一次 exp）随 h 增长。",
    ),
    "mh.vocab": ("Vocabulary", "词表大小"),
    "mh.d_ff": ("d_ff", "d_ff"),
    # positions and norms
    "nav.positions": ("Positions & norms", "位置与归一化"),
    "po.title": ("Word order, relative positions, and normalisation", "词序、相对位置与归一化"),
    "po.order": (
        "Without positions, attention cannot tell 狗咬人 from 人咬狗",
        "没有位置信息，注意力分不清“狗咬人”和“人咬狗”",
    ),
    "po.order_help": (
        "Attention compares every token with every other and sums the values: shuffle the tokens and each token gets exactly the same output, just at another place. Below, each token's final output in the first sentence is compared with the same token's in the second. Without positional encoding the difference is zero (float rounding); with sinusoidal encoding it is not.",
        "注意力让每个词元与其他所有词元比较，再对值向量求和：打乱词元顺序，每个词元得到的输出完全一样，只是位置变了。下面比较第一句中每个词元的最终输出与第二句中同一词元的输出。没有位置编码时差异为零（浮点舍入）；有正弦位置编码时则不同。",
    ),
    "po.first": ("First sentence", "第一句"),
    "po.second": ("Same tokens, another order", "相同词元，不同顺序"),
    "po.token": ("token", "词元"),
    "po.no_pe": ("max |Δ output|, no positional encoding", "最大 |Δ 输出|，无位置编码"),
    "po.pe": ("max |Δ output|, sinusoidal encoding", "最大 |Δ 输出|，正弦位置编码"),
    "po.relative": (
        "Relative positions: attention that acts like a convolution (note 003)",
        "相对位置：像卷积一样工作的注意力（笔记 003）",
    ),
    "po.relative_help": (
        "Give the score a purely positional part: with offset δ = key − query, take r = [δ², δ] and v = −α[1, −2Δ]. Then v·r = −α(δ − Δ)² + αΔ²: the weights peak at δ = Δ and α sets how narrow the peak is. Note 003 derives the 2-D case as α‖δ‖², which peaks nowhere; keeping the Δ terms gives −α‖δ − Δ‖² + α‖Δ‖².",
        "给分数加上纯位置的部分：设偏移 δ = 键位置 − 查询位置，取 r = [δ², δ]，v = −α[1, −2Δ]。于是 v·r = −α(δ − Δ)² + αΔ²：权重在 δ = Δ 处达到峰值，α 决定峰有多窄。笔记 003 在二维情形推出 α‖δ‖²，它没有峰值；保留 Δ 项才得到 −α‖δ − Δ‖² + α‖Δ‖²。",
    ),
    "po.delta": ("Δ (where the head looks, relative to the query)", "Δ（相对查询，头看向哪里）"),
    "po.alpha": ("α (how sharply)", "α（多尖锐）"),
    "po.bars": (
        "One query (the middle position) over 15 positions",
        "一个查询（中间位置）在 15 个位置上的权重",
    ),
    "po.kernel": (
        "9 heads with Δ on a 3×3 grid, around the centre pixel of a 7×7 image",
        "9 个头的 Δ 排成 3×3，作用于 7×7 图像的中心像素",
    ),
    "po.kernel_help": (
        "Each thumbnail is one head's weights over the image. As α grows, head (Δ₁, Δ₂) looks at exactly one pixel, query + Δ: together the 9 heads read a 3×3 window, and W_O mixing their outputs with 9 numbers is a 3×3 convolution.",
        "每个缩略图是一个头在整幅图像上的权重。α 增大时，头 (Δ₁, Δ₂) 只看一个像素：查询 + Δ。9 个头合起来读取一个 3×3 窗口，W_O 用 9 个数混合它们的输出，就是一个 3×3 卷积。",
    ),
    "po.norms": (
        "LayerNorm vs BatchNorm on a (batch, seq, d_model) tensor (note 002)",
        "在 (batch, seq, d_model) 张量上比较 LayerNorm 与 BatchNorm（笔记 002）",
    ),
    "po.norms_help": (
        "LayerNorm normalises each token over its own d_model features: every row below gets mean 0 and std 1, whatever the batch. BatchNorm normalises each feature over all tokens of the batch: every column gets mean 0 and std 1 across the batch, so a token's result depends on the others. Transformers use LayerNorm, inside Add & Norm: LayerNorm(x + Sublayer(x)).",
        "LayerNorm 对每个词元在它自己的 d_model 个特征上归一化：下面每一行均值为 0、标准差为 1，与批次无关。BatchNorm 对每个特征在整个批次的所有词元上归一化：每一列在批次内均值为 0、标准差为 1，因此一个词元的结果取决于其他词元。Transformer 使用 LayerNorm，位于残差与归一化中：LayerNorm(x + Sublayer(x))。",
    ),
    "po.x": ("x (sequence 0 of the batch)", "x（批次中的第 0 个序列）"),
    "po.ln": ("LayerNorm(x): rows mean 0, std 1", "LayerNorm(x)：每行均值 0、标准差 1"),
    "po.bn": (
        "BatchNorm(x): columns mean 0, std 1 over the batch",
        "BatchNorm(x)：每列在批次内均值 0、标准差 1",
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
