"""The Head atlas page (AppTest): it measures the bundled model on the probe set, draws the grid
with one square per head, shows the head a link asks for with its example and a link into Head
detail, speaks both languages, and takes the user's own texts without trusting them."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import pytest

from tests.apphelpers import app

PAGE = "app_pages/atlas.py"


@pytest.fixture(scope="module", autouse=True)
def bundled():
    from attnviz.serve import warmup

    warmup.bundled_model()


def _grid(at) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def _link(at, key: str = "at_open_example") -> dict:
    """The "Open this row in Head detail" link: the page it opens and its query."""
    buttons = [b for b in at.get("link_button") if b.proto.id.endswith(key) or key in b.proto.id]
    assert buttons, "no link into Head detail"
    url = buttons[0].proto.url
    page, _, query = url.partition("?")
    return {"page": page, "query": parse_qs(query)}


def test_opens_with_every_head_on_the_grid():
    at = app(PAGE)
    assert not at.exception, at.exception
    grid = _grid(at)
    heads = [
        (layer, head)
        for trace in grid["data"]
        if trace.get("customdata")
        for layer, head in trace["customdata"]
    ]
    assert sorted(heads) == [(la, h) for la in range(6) for h in range(12)]
    assert "Layer 0, head 0" in at.subheader[0].value
    assert any("11 texts measured (0 of them yours)" in c.value for c in at.caption)


def test_link_opens_the_head_and_its_example():
    at = app(PAGE, {"at_layer": "0", "at_head": "2"})
    assert not at.exception, at.exception
    assert at.subheader[0].value == "Layer 0, head 2: previous token"
    assert float(at.metric[0].value) > 0.9  # previous token
    from attnviz.measures.roles import probe_list

    link = _link(at)
    assert link["page"] == "pretrained"
    q = link["query"]
    assert q["view"] == ["detail"] and q["layer"] == ["0"] and q["head"] == ["2"]
    i, k, source = q["mark"][0].split(",")
    i, k = int(i), int(k)
    assert source == "atlas"
    assert k == i - 1  # a previous-token head's example points at the token before
    assert q["text"][0] in probe_list("en")  # the probe text itself travels in the link
    # The link opens the model page on that text, that head, the cell outlined.
    bert = app("app_pages/pretrained.py", {key: v[0] for key, v in q.items()})
    assert not bert.exception, bert.exception
    assert bert.session_state["text"] == q["text"][0]
    outlined = [c.value for c in bert.caption if c.value.startswith("Outlined")]
    assert outlined and "Head atlas" in outlined[0] and "Link two tokens" not in outlined[0]


def test_chinese_page():
    at = app(PAGE, {"lang": "zh", "at_layer": "0", "at_head": "2"})
    assert not at.exception, at.exception
    assert at.subheader[0].value == "第 0 层，第 2 个头：前一个词元"
    assert at.title[0].value.startswith("注意力头图谱")
    # Streamlit's own uploader lines ("Limit 1MB per file") are English: hidden in Chinese, where
    # each uploader's label says its limit.
    styles = " ".join(h.proto.body for h in at.get("html"))
    assert "stFileUploaderDropzoneInstructions" in styles
    labels = [u.proto.label for u in at.get("file_uploader")]
    assert labels and all("KB" in x or "MB" in x for x in labels), labels
    english = app(PAGE, {"at_layer": "0", "at_head": "2"})
    assert "stFileUploaderDropzoneInstructions" not in " ".join(
        h.proto.body for h in english.get("html")
    )


def test_own_texts_are_measured_and_never_markup():
    hostile = "<script>alert(1)</script> **bold** [x](javascript:alert(1)) the cat the cat"
    at = app(PAGE, {"at_texts": hostile})
    assert not at.exception, at.exception
    assert any("12 texts measured (1 of them yours)" in c.value for c in at.caption)
    for element in (*at.markdown, *at.caption):
        assert "<script>" not in element.value


def test_qk_map_on_request():
    at = app(PAGE, {"at_layer": "0", "at_head": "2", "at_qk": "true", "at_qk_colour": "kind"})
    assert not at.exception, at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 3  # grid, example, Q/K map
    qk = charts[2]
    names = {trace["name"] for trace in qk["data"]}
    assert "query · word" in names and "key · special" in names
    assert any("Q/K map" in s.value for s in at.subheader)


def test_encoder_decoder_gets_a_grid_per_part(tmp_path):
    """A tiny random BART from a folder: the page offers its three attentions; the cross part's
    grid and its link into Head detail carry the part."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, BartConfig

    from attnviz.engine.hooked import resolve

    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=600,
    )  # fmt: skip
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(resolve(None)[0]).save_pretrained(tmp_path)
    at = app(PAGE, {"at_model": str(tmp_path), "at_part": "cross", "at_layer": "1"})
    assert not at.exception, at.exception
    grid = _grid(at)
    heads = sorted(
        tuple(p) for tr in grid["data"] if tr.get("customdata") for p in tr["customdata"]
    )
    assert heads == [(la, h) for la in range(2) for h in range(4)]
    assert "Cross" in grid["layout"]["title"]["text"] or "cross" in grid["layout"]["title"]["text"]
    q = _link(at)["query"]
    assert q["part"] == ["cross"] and q["model"] == [str(tmp_path)] and q["layer"] == ["1"]


def test_too_many_texts_are_cut_with_a_message():
    lines = "\n".join(f"text number {i} is here" for i in range(60))
    at = app(PAGE, {"at_texts": lines})
    assert not at.exception, at.exception
    assert any("71 texts is more than one atlas measures" in w.value for w in at.warning)
    assert any("64 texts measured (60 of them yours)" in c.value for c in at.caption)


def test_every_role_a_head_passes_is_shown():
    """The char model's L1H0 passes previous token and self on the English probes: the card
    lists both, the grid carries a dot of the further role, and the example follows the role
    picked (kept in the URL)."""
    query = {"at_pick": "attnviz-char-zh-en", "at_probes": "en", "at_layer": "1", "at_head": "0"}
    at = app(PAGE, query)
    assert not at.exception, at.exception
    # the bundled-model picker of the Pretrained page, its facts below it
    picker = at.selectbox(key="at_pick")
    assert picker.value == "attnviz-char-zh-en"
    assert all(any(o.startswith(m) for o in picker.options) for m in ("smollm2", "gemma-3"))
    assert any("GPL-3.0-or-later" in c.value for c in at.sidebar.caption)
    assert at.subheader[0].value == "Layer 1, head 0: previous token · self"
    further = [tr for tr in _grid(at)["data"] if tr.get("legendgroup") == "self"]
    assert any(tr.get("hoverinfo") == "skip" and tr["x"] for tr in further)  # the dot
    example = json.loads(at.get("plotly_chart")[1].proto.spec)
    assert "“previous token”" in example["layout"]["title"]["text"]
    at = app(PAGE, {**query, "at_role": "self"})
    example = json.loads(at.get("plotly_chart")[1].proto.spec)
    assert "“self”" in example["layout"]["title"]["text"]
    assert _link(at)["query"]["pick"] == ["attnviz-char-zh-en"]  # the Pretrained page's picker
    i, k = (int(x) for x in _link(at)["query"]["mark"][0].split(",")[:2])
    assert i == k and i >= 1  # a self row, never the forced first one
    strongest = at.get("dataframe")[0].value  # the texts where "self" is strongest
    assert list(strongest.columns)[:2] == ["Text", "Score"] and len(strongest) == 10
    assert strongest["Score"].is_monotonic_decreasing


@pytest.fixture(scope="module")
def saved_atlases(tmp_path_factory):
    """Two saved corpus atlases under a data directory, written as `attnviz atlas` writes them
    (without Ray: the same score_batch and Store)."""
    from attnviz.engine.hooked import load_model
    from attnviz.measures.roles import probe_list
    from attnviz.serve import corpus

    root = tmp_path_factory.mktemp("atlases")
    model = load_model(device="cpu")
    texts = [*probe_list("en")[:6], "<b>far</b> too long " * 6_000]  # the last one: skipped
    store = corpus.Store.open(root / "run1", corpus.Manifest("all-MiniLM-L6-v2", 512, 7, 7, "x"))
    store.write_part(0, corpus.score_batch(model, list(enumerate(texts)), 512))
    frame = store.finish(corpus.Corpus(tuple(texts), tuple(f"probes:{i}" for i in range(7))))
    return root, frame


def test_a_saved_corpus_atlas_opens_from_the_data_directory(saved_atlases, monkeypatch):
    root, frame = saved_atlases
    monkeypatch.setenv("ATTNVIZ_ATLAS_DIR", str(root))
    at = app(PAGE, {"at_source": "saved", "at_saved": "run1", "at_layer": "0", "at_head": "2"})
    assert not at.exception, at.exception
    heads = [p for tr in _grid(at)["data"] if tr.get("customdata") for p in tr["customdata"]]
    assert len(heads) == len(frame) == 72
    assert at.subheader[0].value.startswith("Layer 0, head 2: ")
    assert any("6 texts measured" in c.value for c in at.caption)
    skipped = [
        e
        for e in at.expander
        if e.label == "Texts the run skipped (longer than its token limit; never cut): 1"
    ]
    assert skipped and skipped[0].get("dataframe")[0].value.values.tolist() == [
        ["probes:6", "120,000 characters > 100,000"]
    ]
    assert any("text " in m.value and "(probes" in m.value for m in at.markdown)  # the example
    strongest = at.get("dataframe")[1].value  # after the skipped texts' table
    assert set(strongest["Text"]) <= {f"probes:{i}" for i in range(6)}
    assert _link(at)["query"]["view"] == ["detail"]  # whole texts open in Head detail
    # Only the folders listed: a name that walks out of the directory opens nothing.
    at = app(PAGE, {"at_source": "saved", "at_saved": "../run1"})
    assert not at.exception and not at.get("plotly_chart")
    # Public mode: upload only, the server's folders are not listed.
    monkeypatch.setenv("ATTNVIZ_PUBLIC", "1")
    at = app(PAGE, {"at_source": "saved", "at_saved": "run1"})
    assert not at.exception, at.exception
    assert not [s for s in at.selectbox if s.key == "at_saved"]
    assert not at.get("plotly_chart")  # nothing opened until an upload


def test_a_saved_broad_example_names_its_value_relative_entropy(saved_atlases, monkeypatch):
    """A broad head's saved example is a row's relative entropy, not a weight: labelled so."""
    root, frame = saved_atlases
    monkeypatch.setenv("ATTNVIZ_ATLAS_DIR", str(root))
    broad = frame[(frame["roles"] == "broad") & (frame["part"] == "encoder")].iloc[0]
    query = {"at_source": "saved", "at_saved": "run1"}
    for lang in ("en", "zh"):
        query |= {"at_layer": str(broad.layer), "at_head": str(broad["head"]), "lang": lang}
        at = app(PAGE, query)
        assert not at.exception, at.exception
        example = [m.value for m in at.markdown if "→" in m.value]
        assert example and "w = " not in example[0], example
        assert ("relative entropy = " if lang == "en" else "相对熵 = ") in example[0]
