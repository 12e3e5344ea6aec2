"""The head atlas's rules beyond the single-score oracle of tests/test_roles.py:

1. Every role a head passes is listed (`roles`), the primary first in ROLE_ORDER; rows that may
   see a single key (a decoder's first row, weight 1 by the mask) never count and are never an
   example, on the bundled char model and a tiny random decoder.
2. On text said twice, repeats() points each second-copy token at its counterpart in the first
   copy, also for a character tokenizer.
3. A lean layer read band by band gives the same sums as its whole weights, for every mask rule.
4. Sums pool exactly: the atlas of parts of the texts merged equals the atlas of all of them.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from attnviz.engine import budget as budget_module
from attnviz.engine.hooked import load_model, resolve, trace_model
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.measures import role_scores, roles
from tests.test_bands import RULES, full_copy, lean_layer

TEXTS = [
    "The cat sat on the mat because the mat was warm.",
    "river pencil window garden silver river pencil window garden silver",
    "床前明月光，疑是地上霜。床前明月光。",
]


@pytest.fixture(scope="module")
def char_model():
    return load_model("attnviz-char-zh-en", device="cpu")


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory):
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(
        vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve(None)[0]).save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def check_roles_and_examples(model, texts: list[str]) -> pd.DataFrame:
    """The invariants of the roles and the examples on one model."""
    traces = [trace_model(model, text) for text in texts]
    sums = roles.role_sums(traces)
    frame = roles.merge_sums(sums)
    for row in frame.itertuples():
        passed = row.roles.split(",")
        assert row.role == passed[0]
        scores = {s: getattr(row, s) for s in roles.SCORES}
        for role, threshold in roles.THRESHOLDS.items():
            value = scores[roles.ROLE_SCORE[role]]
            assert (role in passed) == (value >= threshold), (row.layer, row.head, role)
        assert passed == ["mixed"] or passed == [r for r in roles.ROLE_ORDER if r in passed]
        # Every example of every score is a row that may see two keys or more, and its value
        # is the weight there.
        best = roles.best_rows(sums, row.part, row.layer, row.head)
        for score, ex in best.iterrows():
            layer = traces[int(ex.text)].layers[row.layer]
            assert int(layer.mask[int(ex.row)].sum()) >= 2, (row.layer, row.head, score)
            if score in ("previous_token", "first_token", "self", "duplicate_token", "induction"):
                w = layer.head("weights", row.head)[int(ex.row), int(ex.key)]
                assert float(w) == pytest.approx(ex.value, abs=1e-6)
    return frame


def test_char_model_roles_and_no_forced_row(char_model):
    frame = check_roles_and_examples(char_model, TEXTS)
    assert (frame.example_row >= 1).all()  # a decoder's row 0 sees [BOS] alone
    # L0H0 was "self" on [BOS] -> [BOS] (weight 1.000, forced): it is still a self head, now
    # shown on a row that had a choice.
    l0h0 = frame.set_index(["layer", "head"]).loc[(0, 0)]
    assert l0h0.role == "self" and l0h0.example_row >= 1 and l0h0.self < 0.99


def test_tiny_decoder_roles_and_no_forced_row(tiny_decoder):
    frame = check_roles_and_examples(tiny_decoder, TEXTS[:2])
    assert (frame.example_row >= 1).all()


def test_forced_rows_do_not_count():
    """One causal head whose row 0 is forced (weight 1 on itself) and every other row spreads
    evenly: its self score is the mean over rows 1.. only, and row 0 is never its example."""
    n = 6
    mask = torch.ones(n, n, dtype=torch.bool).tril()  # [q, k]
    w = mask.float() / mask.sum(-1, keepdim=True)  # [q, k] uniform over what each row sees
    w = w.unsqueeze(0)  # [head, q, k]
    zeros = torch.zeros(1, n, 2)
    layer = LayerTrace(q=zeros, k=zeros, v=zeros, scores=w, scale=1.0, mask=mask, weights=w,
                       z=zeros, output=torch.zeros(n, 2))  # fmt: skip
    trace = Trace(tokens=[f"t{i}" for i in range(n)], layers=[layer], source="t",
                  meta={"part": "decoder"})  # fmt: skip
    row = roles.roles_from_traces([trace]).iloc[0]
    assert row.self == pytest.approx(sum(1 / (i + 1) for i in range(1, n)) / (n - 1))
    assert row.example_row != 0 and row.entropy == pytest.approx(1.0)


def test_a_sink_can_also_be_an_induction_head():
    """A head that puts 0.6 on the first token and 0.4 on the induction target passes both,
    and is coloured as the rarer of the two."""
    words = [f"w{i}" for i in range(10)]
    tokens = ["<s>", *words, *words]
    n = len(tokens)
    pairs = {i: j for i, j, m in roles.repeats(tokens) if m >= 2}
    w = torch.zeros(1, n, n)  # [head, q, k]
    for i in range(n):
        if i in pairs:
            w[0, i, 0], w[0, i, pairs[i] + 1] = 0.6, 0.4
        else:
            w[0, i, 0] = 1.0
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    zeros = torch.zeros(1, n, 2)
    layer = LayerTrace(q=zeros, k=zeros, v=zeros, scores=w, scale=1.0, mask=mask, weights=w,
                       z=zeros, output=torch.zeros(n, 2))  # fmt: skip
    trace = Trace(tokens=tokens, layers=[layer], source="t", meta={"part": "decoder"})
    row = roles.roles_from_traces([trace]).iloc[0]
    assert row.roles == "induction,first_token" and row.role == "induction"
    assert row.induction == pytest.approx(0.4) and row.first_token > 0.5


def test_repeated_text_points_at_the_first_copy():
    """Character tokens of the English repeated probe: from the second copy's second character
    on, every row's j is its counterpart one copy back, matched on two tokens or more; the
    latest earlier occurrence (the old rule) is a nearer, unrelated one for most of them."""
    text = roles.probe_texts("en")["repeated"][0]
    tokens = list(text)
    half = text[: len(text) // 2].rstrip()
    period = len(half) + 1  # the second copy starts after the space
    assert text[period:] == half
    found = {i: (j, m) for i, j, m in roles.repeats(tokens)}
    second = range(period + 1, len(tokens))
    assert all(found[i] == (i - period, found[i][1]) and found[i][1] >= 2 for i in second)

    def latest(i: int) -> int:
        return max(j for j in range(i - 1) if tokens[j] == tokens[i])

    assert sum(latest(i) != i - period for i in second) > len(second) / 2


@pytest.mark.parametrize("name", sorted(RULES))
def test_lean_bands_give_the_whole_weights_sums(monkeypatch, name):
    monkeypatch.setattr(role_scores, "BAND_CELLS", 6 * 60 * 5)  # 16-row bands
    layers = [lean_layer(50, 50, RULES[name], seed=s) for s in range(2)]
    tokens = [f"t{i % 13}" for i in range(50)]  # repeats, so duplicate and induction count
    tokens[7] = tokens[31] = ","
    special = {"[CLS]": [0], "[SEP]": [44]}
    lean = Trace(tokens=tokens, layers=layers, source="t", special=special)
    full = Trace(tokens=tokens, layers=[full_copy(la) for la in layers], source="t",
                 special=special)  # fmt: skip
    assert all(la.in_bands for la in lean.layers) and not any(la.in_bands for la in full.layers)

    def whole(layer, head=None):
        raise AssertionError("a lean layer's whole weights were read")

    for layer in layers:  # bands only: never [head, n, n]
        layer.weights = layer.scores = whole
    got, want = roles.role_sums([lean]), roles.role_sums([full])
    assert (got["self_n"] > 0).all() and (got["induction_n"] > 0).all()
    pd.testing.assert_frame_equal(got, want, atol=1e-5, rtol=1e-5)


def test_lean_trace_of_a_real_model_gives_the_same_atlas(char_model, monkeypatch):
    """The same scores, roles and largest values within float32 recomputation (5e-5: a lean
    weight of 1 reads 1.00001); an example may move between rows whose
    values are equal within float noise (a self head's 0.99999 on two texts)."""
    full = roles.role_sums([trace_model(char_model, text) for text in TEXTS])
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")  # every trace lean
    budget_module.budget.cache_clear()
    try:
        traces = [trace_model(char_model, text) for text in TEXTS]
        assert all(layer.in_bands for layer in traces[0].layers)
        lean = roles.role_sums(traces)
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    counts = [c for c in full.columns if c.endswith("_n")]
    pd.testing.assert_frame_equal(lean[counts], full[counts])
    tops = [c for c in full.columns if c.endswith("_top")]
    pd.testing.assert_frame_equal(lean[tops], full[tops], atol=5e-5, rtol=1e-5)
    shown = [c for c in roles.merge_sums(full).columns if not c.startswith("example_")]
    pd.testing.assert_frame_equal(roles.merge_sums(lean)[shown], roles.merge_sums(full)[shown],
                                  atol=5e-5, rtol=1e-5)  # fmt: skip


def test_parts_merge_to_the_whole_and_slice_by_text(char_model):
    traces = [trace_model(char_model, text) for text in TEXTS]
    whole = roles.role_sums(traces)
    parts = pd.concat([roles.role_sums(traces[2:], text_ids=[2]),
                       roles.role_sums(traces[:2], text_ids=[0, 1])])  # fmt: skip
    pd.testing.assert_frame_equal(roles.merge_sums(parts), roles.merge_sums(whole), rtol=0,
                                  atol=1e-12)  # fmt: skip
    atlas = roles.head_roles(char_model, TEXTS)  # with the model: the qk_* columns measured
    why = list(roles.QK_COLUMNS)
    assert roles.merge_sums(whole).drop(columns=why).equals(atlas.drop(columns=why))
    assert roles.merge_sums(whole)[why].isna().all().all() and atlas[why].notna().all().all()
    by_text = roles.text_scores(whole, "decoder", 0, 0, "self")
    assert list(by_text.text) != [] and by_text.score.is_monotonic_decreasing
    one = roles.head_roles(char_model, [TEXTS[int(by_text.text.iloc[0])]])
    assert one.self.iloc[0] == pytest.approx(by_text.score.iloc[0], abs=1e-12)
    with pytest.raises(ValueError, match="not head-role sums"):
        roles.merge_sums(pd.DataFrame({"text": [0]}))
    with pytest.raises(ValueError, match="empty"):
        roles.merge_sums(whole.iloc[:0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a lent GPU)")
def test_cuda_traces_give_the_cpu_sums(monkeypatch):
    """A GPU worker's sums (the trace and the bands on the device, full and lean) equal the
    CPU's within float32 recomputation."""
    cpu, gpu = (load_model("attnviz-char-zh-en", device=d) for d in ("cpu", "cuda"))
    for full_bytes in (None, "1"):
        if full_bytes:
            monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", full_bytes)
        budget_module.budget.cache_clear()
        try:
            want = roles.role_sums([trace_model(cpu, text) for text in TEXTS])
            got = roles.role_sums([trace_model(gpu, text) for text in TEXTS])
        finally:
            monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES", raising=False)
            budget_module.budget.cache_clear()
        shown = [c for c in roles.merge_sums(want).columns if not c.startswith("example_")]
        pd.testing.assert_frame_equal(roles.merge_sums(got)[shown], roles.merge_sums(want)[shown],
                                      atol=5e-5, rtol=1e-5)  # fmt: skip
