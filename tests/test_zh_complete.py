"""The Chinese UI is complete: an AppTest walk of every page and view in 中文 finds no English.

Everything a reader sees is collected from the AppTest tree (titles, markdown, captions, alerts,
widget labels, help, options and placeholders, table headers and cells, metrics, buttons,
expanders, figure titles, axis titles, legends and colour-bar titles) and every Latin word in it
must be on the allowlist: token text of the sentences on screen, model names, formulas, units,
Q/K/V and the symbols the notes themselves use.
"""

from __future__ import annotations

import json
import re

import pytest

from attnviz.i18n import examples
from tests.apphelpers import app, pages

WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Symbols, names and units that stay as they are in the Chinese notes and papers; number formats,
# library and model-family names (GPT-2, Llama, BART...), the app's own name and cited authors
# (Abnar & Zuidema, attention rollout) stay as written; so do special tokens (Gemma's <bos>).
ALLOWED = set(
    re.findall(
        r"\S+",
        """
    Q K V q k v z X W O A S M T Z d h n r i j x e f t l H L N B D C E P R U
    QK QKᵀ QKT KV QKV qk WO Wq Wk Wv W_O W_Q W_K W_V W_q W_k W_v d_k d_v d_model d_ff d_head
    Q_i K_j V_j head_i head_1 head_h n_heads n_kv_heads enable_gqa scaled_dot_product_attention
    split_heads repeat_interleave diag expand scale
    MHA MQA GQA FLOPs FLOP KiB MiB GiB KB MB GB ppl BLEU BERT MiniLM fp16 fp32 bf16 int8
    cpu cuda GPU CPU CSV JSON PNG URL Hugging Face PyTorch torch PyPI
    softmax exp max log logit logits Concat concat LayerNorm BatchNorm ReLU FFN MLP PE RoPE
    CLS SEP UNK PAD MASK Transformer nats batch seq
    e alpha delta Delta sqrt frac top Sublayer Var split_head inf nan NaN X_kv
    float32 float16 bfloat16 NumPy attnviz
    GPT Llama Qwen Mistral Gemma Phi OLMo Granite RoBERTa BART Abnar Zuidema AttentionViz PCA
    BOS EOS bos eos ln Top sink Xiao StreamingLLM Kobayashi WordPiece SentencePiece BPE Logit
    Gu Olsson arXiv UTC GGUF
    """,
    )
)


def _texts_of_figure(spec: dict) -> list[str]:
    layout = spec.get("layout", {})
    out = []

    def title(obj) -> None:
        if isinstance(obj, dict):
            t = obj.get("title")
            if isinstance(t, dict):
                out.append(str(t.get("text", "")))
            elif isinstance(t, str):
                out.append(t)

    title(layout)
    for key, value in layout.items():
        if key.startswith(("xaxis", "yaxis")):
            title(value)
    for ann in layout.get("annotations", []) or []:
        out.append(str(ann.get("text", "")))
    for trace in spec.get("data", []):
        if trace.get("showlegend", True) is not False and trace.get("name"):
            out.append(str(trace["name"]))
        title(trace.get("colorbar", {}))
        title(trace.get("marker", {}).get("colorbar", {}) if trace.get("marker") else {})
        gauge_title = trace.get("title")
        if isinstance(gauge_title, dict):
            out.append(str(gauge_title.get("text", "")))
    return out


def visible_texts(at) -> list[str]:
    """Every string a reader sees on the page, from the AppTest tree."""
    out = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning"):
        out += [str(e.value) for e in at.get(kind)]
    out += [str(e.value) for e in at.get("error") if "Traceback" not in str(e.value)]
    out += [str(e.value) for e in at.get("success")]
    for kind in (
        "slider",
        "select_slider",
        "toggle",
        "checkbox",
        "selectbox",
        "radio",
        "multiselect",
        "number_input",
        "text_input",
        "text_area",
        "button_group",
        "button",
        "download_button",
    ):
        for w in at.get(kind):
            if getattr(w, "key", None) == LANGUAGE_PICKER:
                continue
            out.append(str(getattr(w, "label", "") or ""))
            out.append(str(getattr(w, "help", "") or ""))
            if kind in ("selectbox", "radio", "multiselect", "select_slider", "button_group"):
                out += [str(o) for o in w.options]
            # (an empty-string option that is selected, e.g. "none", is a value, not unset)
            if (kind == "selectbox" and w.value is None) or (kind == "multiselect" and not w.value):
                # An unset placeholder shows the frontend's English default.
                default = "Choose options" if kind == "multiselect" else "Choose an option"
                out.append(str(w.proto.placeholder) or default)
    for df in at.get("dataframe"):
        table = df.value
        out += [str(c) for c in table.columns]
        for col in table.columns:
            out += [str(v) for v in table[col].tolist() if isinstance(v, str) or v is None]
    for m in at.get("metric"):
        out += [str(m.label), str(m.value), str(m.proto.help)]
    for e in at.get("expandable"):
        out.append(str(e.label))
    for p in at.get("progress"):
        out.append(str(p.proto.text))
    for c in at.get("plotly_chart"):
        out += _texts_of_figure(json.loads(c.proto.spec))
    return [s for s in out if s]


def _allowed_words(at) -> set[str]:
    """The page's own sentences: token text stays as typed (and in pieces, as tokenizers cut);
    the head atlas's probe texts too (its table of strongest texts quotes them); the names of the
    models that load by name (attnviz-char-zh-en) stay as written."""
    from attnviz.engine.bundled import bundled_models
    from attnviz.measures.roles import probe_list

    sentences = list(examples("en").values()) + list(examples("zh").values())
    sentences += probe_list("both") + [m.name for m in bundled_models()]
    for kind in ("text_area", "text_input"):
        sentences += [str(w.value or "") for w in at.get(kind)]
    return {w for s in sentences for w in re.findall(r"[A-Za-z]+", s)}


# The language picker names each language in its own language, by design.
LANGUAGE_PICKER = "lang"


def english_words(at) -> dict[str, list[str]]:
    ok = ALLOWED | _allowed_words(at)
    found: dict[str, list[str]] = {}
    for text in visible_texts(at):
        plain = re.sub(r"\$[^$]*\$", " ", text)  # inline LaTeX is a formula
        plain = re.sub(r"`[^`]*`", " ", plain)  # code spans: names of code
        plain = re.sub(r":[a-z]+-badge\[|:material/\w+:", " ", plain)  # st.badge's markup
        plain = re.sub(r"https?://\S+", " ", plain)
        plain = re.sub(r"<br>", " ", plain)  # a chart title's line break (spec.layout_dict)
        plain = re.sub(r"(?<=[^\sA-Za-z])_[A-Za-z0-9]{1,3}\b", " ", plain)  # 权重_ij
        plain = re.sub(r"《[^》]*》", " ", plain)  # a book or paper title stays in its language
        plain = re.sub(r"\b\w+(?:-\w+){2,}\b", " ", plain)  # model ids: bert-base-chinese
        plain = re.sub(r"[\w.-]+/[\w.-]+|\S+\.(json|csv|png|npz|safetensors)\b", " ", plain)
        for word in WORD.findall(plain):
            subscript = re.fullmatch(r"[A-Za-z]{1,4}_[A-Za-z0-9]", word)  # x_j, q_i, head_h
            if len(word) > 1 and word not in ok and not subscript and not re.search(r"\d", word):
                found.setdefault(word, []).append(text[:120])
    return found


VIEWS = ["heads", "overview", "detail", "lines", "rollout", "query", "link", "outputs", "stats"]
STATES = (
    [(p, {}) for p in pages()]
    + [("app_pages/playground.py", {"view": v, "causal": "true"}) for v in VIEWS]
    + [("app_pages/pretrained.py", {"view": v, "wi_scale": "false"}) for v in VIEWS]
    + [
        ("app_pages/playground.py", {"text": ""}),
        ("app_pages/playground.py", {"dk_auto": "false", "heads": "7", "pos": "none"}),
        ("app_pages/pretrained.py", {"text": ""}),
        ("app_pages/pretrained.py", {"model": "no-such-org/no-such-model-xyz"}),
        ("app_pages/multihead.py", {"text": ""}),
        ("app_pages/multihead.py", {"mh_h": "8", "mh_kv": "2"}),
        ("app_pages/sharing.py", {"text": ""}),
        ("app_pages/sharing.py", {"sh_pick": "attnviz-char-zh-en"}),  # a real model's K maps
        ("app_pages/positions.py", {"po_b": "猫咬人"}),
        ("app_pages/positions.py", {"po_a": ""}),
        ("app_pages/step_by_step.py", {"st_causal": "true", "st_scale": "false"}),
        ("app_pages/step_by_step.py", {"st_own": "true", "text": ""}),
    ]
)


@pytest.mark.parametrize(
    ("page", "query"), STATES, ids=[f"{p.split('/')[-1][:-3]}-{q}" for p, q in STATES]
)
def test_no_english_in_the_chinese_ui(page: str, query: dict) -> None:
    at = app(page, query={"lang": "中文", **query})
    assert not at.exception, [e.value for e in at.exception]
    if page == "app_pages/step_by_step.py" and len(at.button) > 1:  # walk every step
        for _ in range(3):
            at.button[1].click().run()
            assert not english_words(at), english_words(at)
    found = english_words(at)
    assert not found, "\n".join(f"{w}: {where[0]!r}" for w, where in sorted(found.items()))


def test_the_walk_sees_english_when_there_is_some() -> None:
    # The detector itself: the English UI is full of words it must flag.
    at = app("app_pages/multihead.py")
    assert {"Parameters", "part"} & set(english_words(at))


def test_a_failed_load_is_summarised_in_chinese_with_the_loaders_message_kept() -> None:
    query = {"model": "no-such-org/no-such-model-xyz"}
    zh = app("app_pages/pretrained.py", query={"lang": "中文", **query})
    assert any("无法加载" in e.value and "应用仍可使用" in e.value for e in zh.error)
    assert any(e.label == "加载器的原始报错（英文）" for e in zh.expander)
    assert any("no-such-org/no-such-model-xyz" in c.value for c in zh.code)
    en = app("app_pages/pretrained.py", query=query)
    assert any(e.value.startswith("Could not load") for e in en.error)
    assert not any(e.label == "The loader's own message (in English)" for e in en.expander)
