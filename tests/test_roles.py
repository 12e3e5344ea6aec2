"""head_roles (attnviz.measures.roles) against the truth.

1. Its scores equal the issue's definitions recomputed here, independently, from Hugging Face's
   eager attention (`output_attentions`), within 1e-4: on the bundled model and a tiny random
   decoder (Llama with GQA); an encoder-decoder (BART) gets rows per part.
2. A hand-built 2-layer attention-only model (plain torch, weights set by hand) whose heads' roles
   are known by construction: a previous-token head, an induction head that reads what the
   previous-token head wrote, a first-token head, and distractors (self, broad, fixed-offset).
   head_roles finds exactly the planted heads and gives no other head their roles.
"""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    LlamaConfig,
)

from attnviz import StackConfig
from attnviz.engine.hooked import load_model, resolve
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.measures import roles
from attnviz.measures.qkmap import qk_map

ATOL = 1e-4
SCORES = ["previous_token", "first_token", "self", "duplicate_token", "induction", "entropy"]
TEXTS = [
    "The cat sat on the mat because the mat was warm.",
    "river pencil window garden silver river pencil window garden silver",
    "When the rain stopped, the children ran outside; the rain came back.",
]


# ---- the definitions, recomputed from a list of per-layer attentions -----------------------


def earlier(tok: list, i: int, context: int = 8) -> tuple[int, int] | None:
    """The issue's (j, m) for row i, brute force: of the earlier j with tok[j] == tok[i] and
    j + 1 < i, the one whose preceding tokens match i's longest (m tokens, up to `context`),
    latest first."""
    best, best_len = None, 0
    for j in range(i - 1):
        if tok[j] != tok[i]:
            continue
        m = 1
        while m < context and j - m >= 0 and tok[j - m] == tok[i - m]:
            m += 1
        if m >= best_len:
            best, best_len = j, m
    return None if best is None else (best, best_len)


def oracle(attentions: list[list[torch.Tensor]], ids: list[list[int]], causal: bool) -> dict:
    """{(layer, head): {score: mean}} from each text's attentions ([head, n, n] per layer) and
    token ids, by the issue's definitions, one row at a time; only rows that may see two keys
    or more count (a decoder's first row is forced)."""
    sums: dict = {}
    for per_layer, tok in zip(attentions, ids, strict=True):
        n = len(tok)
        pairs = [(i, *jm) for i in range(n) if (jm := earlier(tok, i)) is not None]
        for layer, w in enumerate(per_layer):
            w = w.double()
            for h in range(w.shape[0]):
                acc = sums.setdefault((layer, h), {s: [0.0, 0] for s in SCORES})

                def put(name, value, acc=acc):
                    acc[name][0] += float(value)
                    acc[name][1] += 1

                for i in range(n):
                    row = w[h, i]
                    seen = i + 1 if causal else n
                    if seen < 2:
                        continue
                    put("self", row[i])
                    if i >= 1:
                        put("previous_token", row[i - 1])
                        put("first_token", row[0])
                    p = row[:seen]
                    ent = -sum(float(x) * math.log(float(x)) for x in p if x > 0)
                    put("entropy", ent / math.log(seen))
                for i, j, m in pairs:
                    if (i + 1 if causal else n) < 2:
                        continue
                    put("duplicate_token", w[h, i, j])
                    if m >= 2:  # induction: inside a repeated stretch
                        put("induction", w[h, i, j + 1])
    return {key: {s: a / c for s, (a, c) in acc.items()} for key, acc in sums.items()}


def compare(frame: pd.DataFrame, expected: dict, part: str) -> None:
    rows = frame[frame.part == part]
    assert len(rows) == len(expected)
    for row in rows.itertuples():
        want = expected[(row.layer, row.head)]
        for score in SCORES:
            got = getattr(row, score)
            assert abs(got - want[score]) <= ATOL, (part, row.layer, row.head, score, got)


# ---- against Hugging Face eager attention ---------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve(None)[0])


def test_bundled_model_matches_eager_attentions(tokenizer):
    folder = resolve(None)[0]
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    attentions, ids = [], []
    for text in TEXTS:
        enc = tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            out = eager(**enc, output_attentions=True)
        attentions.append([a[0] for a in out.attentions])  # [head, n, n] per layer
        ids.append(enc["input_ids"][0].tolist())
    frame = roles.head_roles(load_model(device="cpu"), TEXTS)
    assert list(frame.columns[:9]) == ["part", "layer", "head", *SCORES[:5], "entropy"]
    assert len(frame) == 6 * 12 and set(frame.part) == {"encoder"}
    compare(frame, oracle(attentions, ids, causal=False), "encoder")
    assert frame["role"].isin(roles.ROLES).all()


def test_tiny_decoder_matches_eager_attentions(tmp_path, tokenizer):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    eager = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    attentions, ids = [], []
    for text in TEXTS:
        enc = tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            out = eager(**enc, output_attentions=True)
        attentions.append([a[0] for a in out.attentions])
        ids.append(enc["input_ids"][0].tolist())
    frame = roles.head_roles(load_model(str(tmp_path), device="cpu"), TEXTS)
    assert set(frame.part) == {"decoder"} and len(frame) == 2 * 4
    compare(frame, oracle(attentions, ids, causal=True), "decoder")


def test_encoder_decoder_has_rows_per_part(tmp_path, tokenizer):
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    eager = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    attentions, ids = [], []
    for text in TEXTS:
        enc = tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            out = eager.get_encoder()(**enc, output_attentions=True)
        attentions.append([a[0] for a in out.attentions])
        ids.append(enc["input_ids"][0].tolist())
    frame = roles.head_roles(load_model(str(tmp_path), device="cpu"), TEXTS)
    counts = frame.groupby("part").size().to_dict()
    assert counts == {"encoder": 2 * 4, "decoder": 1 * 2, "cross": 1 * 2}
    compare(frame, oracle(attentions, ids, causal=False), "encoder")
    cross = frame[frame.part == "cross"]
    # Keys of cross-attention are the source's tokens: positional scores do not apply.
    assert cross[["previous_token", "self", "induction"]].isna().all().all()
    assert cross[["first_token", "entropy"]].notna().all().all()


def test_toy_stack_and_invariants():
    config = StackConfig(n_layers=2, n_heads=4, causal=True, seed=3)
    frame = roles.head_roles(config, roles.probe_list("both"))
    assert len(frame) == 8 and set(frame.part) == {"decoder"}
    scores = frame[["previous_token", "first_token", "self", "duplicate_token", "induction"]]
    assert ((scores >= 0) & (scores <= 1 + 1e-6)).all().all()
    assert ((frame.entropy >= 0) & (frame.entropy <= 1 + 1e-6)).all()
    # The same atlas from the traces themselves.
    from attnviz import trace_text

    again = roles.roles_from_traces(trace_text(t, config) for t in roles.probe_list("both"))
    pd.testing.assert_frame_equal(frame, again)


def test_a_broad_example_is_a_row_that_sees_enough_keys():
    """A causal model's row 1 weighs its 2 keys about evenly: relative entropy near 1, broad
    only trivially. The entropy's example is a row that sees BROAD_KEYS keys or more (in a text
    that long), the rule roles' docstring states."""
    from attnviz import trace_text
    from attnviz.measures.role_scores import BROAD_KEYS

    config = StackConfig(d_model=32, n_heads=4, n_layers=2, causal=True, seed=0)
    texts = [
        "the quick brown fox jumps over the lazy dog again and again today",
        "a cat sat on the mat and then it slept for a long time",
    ]
    assert min(len(trace_text(t, config).tokens) for t in texts) > BROAD_KEYS
    frame = roles.head_roles(config, texts)
    broad = frame[frame.example_score == "entropy"]
    assert len(broad) == len(frame)  # every head of the random stack shows its entropy
    assert (broad.example_row + 1 >= BROAD_KEYS).all(), broad.example_row.tolist()  # causal
    sums = roles.head_role_sums(config, texts)
    assert (sums.entropy_row + 1 >= BROAD_KEYS).all()
    for row in broad.itertuples():  # best_rows, the saved atlas's example, agrees
        best = roles.best_rows(sums, "decoder", row.layer, row.head).loc["entropy"]
        assert best.row == row.example_row and best.value <= 1 + 1e-6
    # A text shorter than BROAD_KEYS: its example row is one that sees the most keys.
    short = roles.head_role_sums(config, ["one two three four"])
    n = len(trace_text("one two three four", config).tokens)
    assert n < BROAD_KEYS and (short.entropy_row == n - 1).all()


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="list of texts"):
        roles.head_roles(StackConfig(), "one string")
    with pytest.raises(ValueError, match="1 to"):
        roles.head_roles(StackConfig(), [])
    with pytest.raises(ValueError, match="non-blank"):
        roles.head_roles(StackConfig(), ["ok", "  "])
    with pytest.raises(TypeError, match="load_model"):
        roles.head_roles(42, ["ok"])


def test_probe_set_both_languages():
    for lang in ("en", "zh"):
        probes = roles.probe_texts(lang)
        assert len(probes["natural"]) >= 6 and probes["passage"] and probes["repeated"]
        for text in probes["repeated"]:  # the second half repeats the first
            units = text.split() if lang == "en" else list(text)
            half = len(units) // 2
            assert units[:half] == units[half:] and len(set(units[:half])) == half
    # Row 3's latest earlier "a" is its previous token: the one before it counts.
    assert roles.repeats(["a", "b", "a", "a", "c", "b"]) == [(2, 0, 1), (3, 0, 1), (5, 1, 1)]
    assert (
        roles.is_punctuation("##.") and roles.is_punctuation("。") and not roles.is_punctuation("a")
    )


# ---- a model whose roles are known by construction --------------------------------------------

VOCAB = [f"w{i}" for i in range(24)]
BOS = "<s>"
N_POS = 64
C = 30.0  # logit gap: near one-hot attention


class HandBuilt:
    """Two attention-only layers, four heads each, causal, weights set by hand. The residual
    stream holds [token one-hot | position one-hot | previous token one-hot | 1].

    Layer 0: h0 previous token (writes the previous token into its slot), h1 first token,
    h2 self, h3 two back. Layer 1: h0 induction (its key is the previous-token slot, so it
    attends to the token after the current token's earlier occurrence), h1 broad (all zeros:
    uniform), h2 three back, h3 self."""

    def __init__(self, prev_writes: bool = True) -> None:
        v, p = len(VOCAB) + 1, N_POS
        self.tok, self.pos, self.prev, self.one = 0, v, v + p, v + p + v
        self.d = v + p + v + 1
        self.dh = max(v, p)
        self.vocab = {BOS: len(VOCAB), **{w: i for i, w in enumerate(VOCAB)}}
        zero = lambda: torch.zeros(self.d, self.dh)  # noqa: E731
        L0 = [dict(q=zero(), k=zero(), v=zero(), o=torch.zeros(self.dh, self.d)) for _ in range(4)]
        L1 = [dict(q=zero(), k=zero(), v=zero(), o=torch.zeros(self.dh, self.d)) for _ in range(4)]
        for i in range(p):  # position-offset heads: query pos i looks for key pos i - offset
            for head, offset in ((L0[0], 1), (L0[2], 0), (L0[3], 2), (L1[2], 3), (L1[3], 0)):
                head["k"][self.pos + i, i] = 1.0
                if i - offset >= 0:
                    head["q"][self.pos + i, i - offset] = C
        L0[1]["q"][self.one, 0] = C  # first token: every query asks for position 0
        L0[1]["k"][self.pos + 0, 0] = 1.0
        for t in range(v):
            L0[0]["v"][self.tok + t, t] = 1.0  # the previous-token head copies the token ...
            if prev_writes:
                L0[0]["o"][t, self.prev + t] = 1.0  # ... into the previous-token slot
            L1[0]["q"][self.tok + t, t] = C  # induction: my token ...
            L1[0]["k"][self.prev + t, t] = 1.0  # ... was the previous token of that key
        self.layers = [L0, L1]

    def embed(self, tokens: list[str]) -> torch.Tensor:
        x = torch.zeros(len(tokens), self.d)  # [n, d]
        for i, token in enumerate(tokens):
            x[i, self.tok + self.vocab[token]] = 1.0
            x[i, self.pos + i] = 1.0
            x[i, self.one] = 1.0
        return x

    def __call__(self, text: str) -> Trace:
        tokens = text.split()
        n = len(tokens)
        x = self.embed(tokens)  # [n, d]
        mask = torch.ones(n, n, dtype=torch.bool).tril()  # [q, k]
        layers = []
        for heads in self.layers:
            q = torch.stack([x @ h["q"] for h in heads])  # [head, n, dh]
            k = torch.stack([x @ h["k"] for h in heads])  # [head, n, dh]
            v = torch.stack([x @ h["v"] for h in heads])  # [head, n, dh]
            scores = q @ k.transpose(-1, -2)  # [head, n, n]
            weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
            z = weights @ v  # [head, n, dh]
            output = sum(z[i] @ h["o"] for i, h in enumerate(heads))  # [n, d]
            layers.append(LayerTrace(q=q, k=k, v=v, scores=scores, scale=1.0, mask=mask,
                                     weights=weights, z=z, output=output, x=x))  # fmt: skip
            x = x + output  # residual
        return Trace(tokens=tokens, layers=layers, source="hand-built", meta={"part": "decoder"})


def hand_texts(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(4):  # no repeats
        texts.append(" ".join([BOS, *rng.sample(VOCAB, 16)]))
    for _ in range(4):  # random words, then the same again
        words = rng.sample(VOCAB, 12)
        texts.append(" ".join([BOS, *words, *words]))
    return texts


PLANTED = {(0, 0): "previous_token", (0, 1): "first_token", (1, 0): "induction"}


def test_hand_built_model_planted_heads_are_found():
    frame = roles.head_roles(HandBuilt(), hand_texts())
    found = {(r.layer, r.head): r.role for r in frame.itertuples()}
    for head, role in PLANTED.items():
        assert found[head] == role, (head, frame.iloc[head[0] * 4 + head[1]].to_dict())
    others = {head: role for head, role in found.items() if head not in PLANTED}
    assert not set(others.values()) & set(PLANTED.values()), others
    # The distractors are what they were built to be.
    assert found[(0, 2)] == found[(1, 3)] == "self" and found[(1, 1)] == "broad"
    assert found[(0, 3)] == found[(1, 2)] == "mixed"
    row = frame.set_index(["layer", "head"])
    assert row.loc[(0, 0), "previous_token"] > 0.99 and row.loc[(0, 1), "first_token"] > 0.99
    assert row.loc[(1, 0), "induction"] > 0.99 and row.loc[(1, 0), "duplicate_token"] < 0.01
    # Its example is a repeated text, on the second pass, pointing at the token after the
    # earlier occurrence of the query's token.
    ex = row.loc[(1, 0)]
    tokens = hand_texts()[ex.example_text].split()
    i, key = ex.example_row, ex.example_key
    assert tokens[key - 1] == tokens[i] and key < i


def test_induction_needs_the_previous_token_head():
    """Cut the previous-token head's write and the induction head loses its role: it is a
    circuit of two heads, and head_roles measures what the model does, not what it is named."""
    frame = roles.head_roles(HandBuilt(prev_writes=False), hand_texts())
    induction = frame.set_index(["layer", "head"]).loc[(1, 0)]
    assert induction.role != "induction" and induction.induction < 0.2


# ---- the Q/K map ------------------------------------------------------------------------------


def test_qk_map_distance_tracks_the_dot_product():
    """On the hand-built previous-token head, query i and key i-1 have the largest q·k; in the
    joint embedding (every component kept) that key is the query's nearest, in every text."""
    model = HandBuilt()
    texts = hand_texts()[:3]
    traces = [model(text) for text in texts]
    n_q = sum(len(tr.tokens) for tr in traces)
    points = qk_map(traces, 0, 0, dims=64)
    assert len(points) == 2 * n_q and set(points.kind) == {"query", "key"}
    coords = torch.tensor(points[["x", "y", *[c for c in points if c.startswith("pc")]]].values)
    queries, keys = points.kind == "query", points.kind == "key"
    for t in range(len(texts)):
        q = coords[torch.tensor((queries & (points.text == t)).values)]  # [n, d]
        k = coords[torch.tensor((keys & (points.text == t)).values)]  # [n, d]
        nearest = torch.cdist(q, k)[1:].argmin(-1)  # rows i >= 1
        assert nearest.tolist() == list(range(len(q) - 1))


def test_qk_map_uses_what_the_softmax_saw(tmp_path, tokenizer):
    """A Llama with GQA and RoPE: the q and k the map reads (after RoPE, the head's K/V group)
    give back the traced weights through softmax(q·k·scale, masked)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = load_model(str(tmp_path), device="cpu")
    from attnviz.engine.hooked import trace_model

    trace = trace_model(model, TEXTS[1])
    layer = trace.layers[0]
    for head in range(4):
        q, k = layer.head("q", head), layer.head("k", head // 2)  # [n, d] each
        logits = (q @ k.T * layer.scale).masked_fill(~layer.mask, float("-inf"))
        assert torch.allclose(torch.softmax(logits, -1), layer.head("weights", head), atol=1e-5)
    points = qk_map([trace], 0, 3)
    assert len(points) == 2 * len(trace.tokens) and points[["x", "y"]].notna().all().all()
