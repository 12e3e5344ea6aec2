"""The CUDA path: a trace made on a GPU keeps its tensors there, and what a view reads is the CPU
trace's numbers. Each model is tiny, random and built from its config class (no download), traced
on the GPU and on the CPU from the same folder and compared field by field.

Skipped, with the reason printed, where torch sees no CUDA device (CI has none); run on a GPU
machine with `python -m pytest tests/test_cuda.py`. ATTNVIZ_TEST_TOKENIZER may name a folder with
the tokenizer's files where the bundled model is not installed; ATTNVIZ_TEST_DEVICE=cpu runs the
same checks with the CPU as the second device (a check of the tests themselves)."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, BertConfig, LlamaConfig

from attnviz.engine.hooked import load_model, resolve, trace_each, trace_model
from attnviz.engine.trace import compact, pooled_weights

DEVICE = os.environ.get("ATTNVIZ_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(),
    reason="no CUDA device here: the GPU path is checked on one",
)

FIELDS = ("q", "k", "v", "scores", "weights", "z", "output")
TEXT = "the animal did not cross the street because it was too tired"
SMALL = dict(
    vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=128,
)  # fmt: skip
KNOBS = [
    {},
    {"temperature": 2.0},
    {"use_scale": False},
    {"ablate": [(1, 0), (0, 3)]},
    {"mask_tokens": [2, 5]},
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(
        os.environ.get("ATTNVIZ_TEST_TOKENIZER") or resolve(None)[0]
    )


def pair(folder_factory, tokenizer, model, name: str):
    folder = folder_factory.mktemp(name)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder), device="cpu"), load_model(str(folder), device=DEVICE)


@pytest.fixture(scope="module")
def bert(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    model = AutoModel.from_config(BertConfig(**SMALL))
    return pair(tmp_path_factory, tokenizer, model, "bert")


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**SMALL, num_key_value_heads=2))  # GQA
    return pair(tmp_path_factory, tokenizer, model, "llama")


def assert_same(cpu_trace, gpu_trace) -> None:
    assert gpu_trace.tokens == cpu_trace.tokens
    for lc, lg in zip(cpu_trace.layers, gpu_trace.layers, strict=True):
        for name in FIELDS:
            assert lg.stored(name).device.type == DEVICE, name  # nothing copied by the trace
            got = getattr(lg, name)  # what a view reads: CPU, float32
            assert got.device.type == "cpu" and got.dtype == torch.float32
            torch.testing.assert_close(got, getattr(lc, name), atol=5e-5, rtol=1e-4)
        assert lg.scale == pytest.approx(lc.scale)
        torch.testing.assert_close(lg.mask, lc.mask)
        w = lg.weights
        assert not torch.isnan(w).any()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)
        if lg.mask is not None:
            assert (w.masked_select(~lg.mask) == 0).all()  # masked weights exactly 0


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: ",".join(k) or "plain")
def test_encoder_on_the_gpu_gives_the_cpu_numbers(bert, knobs) -> None:
    cpu, gpu = bert
    assert_same(trace_model(cpu, TEXT, **knobs), trace_model(gpu, TEXT, **knobs))


def test_sentence_pair_and_embedding_on_the_gpu(bert) -> None:
    cpu, gpu = bert
    a, b = trace_model(cpu, TEXT, "a dog ran"), trace_model(gpu, TEXT, "a dog ran")
    assert_same(a, b)
    assert b.token_types == a.token_types and b.special == a.special
    torch.testing.assert_close(b.embedding.cpu(), a.embedding, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("knobs", KNOBS[:4], ids=lambda k: ",".join(k) or "plain")
def test_decoder_with_gqa_on_the_gpu_gives_the_cpu_numbers(llama, knobs) -> None:
    cpu, gpu = llama
    a, b = trace_model(cpu, TEXT, **knobs), trace_model(gpu, TEXT, **knobs)
    assert_same(a, b)
    assert b.layers[0].stored("k").shape[0] == 2  # K/V heads kept unexpanded on the device
    torch.testing.assert_close(b.next_logits.cpu(), a.next_logits, atol=1e-4, rtol=1e-4)


def test_views_copy_one_head_and_the_pooled_mosaic(bert) -> None:
    cpu, gpu = bert
    long_text = " ".join([TEXT] * 8)  # ~100 tokens: pooled below its size
    a, b = trace_model(cpu, long_text), trace_model(gpu, long_text)
    pa, pb = pooled_weights(a, 48, 48), pooled_weights(b, 48, 48)
    assert pb.device.type == "cpu" and pb.shape == pa.shape == (2, 4, 48, 48)
    torch.testing.assert_close(pb, pa, atol=1e-5, rtol=1e-4)
    one = b.layers[1].head("weights", 3)
    assert one.device.type == "cpu" and one.shape == (len(b.tokens), len(b.tokens))
    torch.testing.assert_close(one, a.layers[1].weights[3], atol=5e-5, rtol=1e-4)


def test_compact_trace_recomputes_scores_on_the_gpu(bert) -> None:
    cpu, gpu = bert
    a, b = trace_model(cpu, TEXT), compact(trace_model(gpu, TEXT))
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert lb.stored("scores").device.type == DEVICE
        torch.testing.assert_close(lb.scores, la.scores, atol=1e-4, rtol=1e-4)


def test_batched_traces_on_the_gpu_equal_single_ones(bert) -> None:
    _, gpu = bert
    texts = [TEXT, "a dog ran", "the cat sat on the mat and then it slept for a long time"]
    for text, got in zip(texts, trace_each(gpu, texts), strict=True):
        assert_same(trace_model(gpu, text), got)


def test_bfloat16_on_the_gpu_reads_back_float32_rows_that_sum_to_one(tmp_path, tokenizer) -> None:
    torch.manual_seed(0)
    config = BertConfig(**SMALL)
    AutoModel.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    exact = trace_model(load_model(str(tmp_path), device="cpu"), TEXT, mask_tokens=[3])
    half = trace_model(load_model(str(tmp_path), device=DEVICE, dtype="bfloat16"), TEXT,
                       mask_tokens=[3])  # fmt: skip
    for la, lb in zip(exact.layers, half.layers, strict=True):
        assert lb.stored("weights").dtype == torch.bfloat16
        w = lb.weights
        assert w.dtype == torch.float32 and not torch.isnan(w).any()
        assert (w[..., 3] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=2e-2, rtol=0)
        torch.testing.assert_close(w, la.weights, atol=2e-2, rtol=0)


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: ",".join(k) or "plain")
def test_a_lean_trace_stays_on_the_device_and_recomputes_the_cpu_numbers(llama, knobs) -> None:
    # A long input's trace (forced here by a 1-byte full-trace limit): q, k, v, z, output and the
    # log-sum-exp stay on the device; weights and blocks are recomputed there, read on the CPU.
    import attnviz.engine.budget as budget_module

    cpu, gpu = llama
    os.environ["ATTNVIZ_FULL_TRACE_BYTES"] = "1"
    budget_module.budget.cache_clear()
    try:
        a, b = trace_model(cpu, TEXT, **knobs), trace_model(gpu, TEXT, **knobs)
    finally:
        del os.environ["ATTNVIZ_FULL_TRACE_BYTES"]
        budget_module.budget.cache_clear()
    assert a.meta["lean"] and b.meta["lean"]
    for lc, lg in zip(a.layers, b.layers, strict=True):
        assert lg.in_bands
        for name in ("q", "k", "v", "z", "output", "lse"):
            assert lg.stored(name).device.type == DEVICE, name
            torch.testing.assert_close(getattr(lg, name), getattr(lc, name), atol=5e-5, rtol=1e-4)
        w = lg.weights  # [head, q, k] recomputed
        torch.testing.assert_close(w, lc.weights, atol=5e-5, rtol=1e-4)
        assert not torch.isnan(w).any() and (w.masked_select(~lg.mask) == 0).all()
        live = lg.mask.any(-1)
        torch.testing.assert_close(
            w.sum(-1)[:, live], torch.ones(4, int(live.sum())), atol=1e-5, rtol=0
        )
        block = lg.block("weights", 3, slice(2, 9), slice(0, 5))
        torch.testing.assert_close(block, lc.weights[3, 2:9, :5], atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(pooled_weights(b, 4, 4), pooled_weights(a, 4, 4), atol=5e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_the_fused_kernel_gives_the_blocked_path_numbers(dtype, causal) -> None:
    # On a GPU, attend_lean takes z and the log-sum-exp from torch's fused kernels (FlashAttention
    # for 16-bit inputs, the memory-efficient kernel for float32); a rule with an explicit key mask
    # (every key allowed) sends the same inputs through the blocked path, which is exact.
    from attnviz.engine.lean import MaskRule, attend_lean

    torch.manual_seed(0)
    n, d = 700, 64
    q = torch.randn(1, 8, n, d, device=DEVICE).to(dtype)  # [b, head, q, d]
    k = torch.randn(1, 2, n, d, device=DEVICE).to(dtype)  # [b, kv_head, k, d] (GQA, 4 per group)
    v = torch.randn(1, 2, n, d, device=DEVICE).to(dtype)
    keys = torch.ones(1, n, dtype=torch.bool, device=DEVICE)
    z, lse = attend_lean(q, k, v, MaskRule(n, n, causal), d**-0.5)
    z0, lse0 = attend_lean(q, k, v, MaskRule(n, n, causal, keys=keys), d**-0.5)
    assert lse.shape == lse0.shape == (1, 8, n) and lse.dtype == torch.float32
    torch.testing.assert_close(lse, lse0, atol=1e-4, rtol=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(z.float(), z0.float(), atol=tol, rtol=tol)


RULES = {  # (n_q, n_k, causal, window, first keys hidden, q_offset)
    "window": (700, 700, True, 100, 0, 0),
    "padding": (700, 700, True, None, 0, 0),
    "hidden, no key": (700, 700, True, 64, 10, 0),
    "offset": (650, 700, True, None, 0, 50),
    "full, hidden": (700, 700, False, None, 30, 0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(RULES))
def test_the_biased_fused_kernel_gives_the_blocked_path_numbers(dtype, case, monkeypatch) -> None:
    # A window, padding, hidden keys or a query offset run on a GPU as one memory-efficient kernel
    # with the rule as an additive bias; the blocked path (BIAS_BYTES = 0) is the reference. Rows
    # that may see no key (the first 10 with the first 10 keys hidden, causal) give z = lse = 0.
    from attnviz.engine import lean
    from attnviz.engine.lean import MaskRule, attend_lean

    n_q, n_k, causal, window, hidden, offset = RULES[case]
    torch.manual_seed(0)
    d = 64
    q = torch.randn(2, 8, n_q, d, device=DEVICE).to(dtype)  # [b, head, q, d]
    k = torch.randn(2, 2, n_k, d, device=DEVICE).to(dtype)  # [b, kv_head, k, d]
    v = torch.randn(2, 2, n_k, d, device=DEVICE).to(dtype)
    keys = torch.ones(2, n_k, dtype=torch.bool)
    keys[:, :hidden] = False
    keys[1, n_k - 37 :] = False  # the second item padded
    rule = MaskRule(n_q, n_k, causal, window, keys, offset)
    z, lse = attend_lean(q, k, v, rule, d**-0.5)
    monkeypatch.setattr(lean, "BIAS_BYTES", 0)
    z0, lse0 = attend_lean(q, k, v, rule, d**-0.5)
    assert lse.shape == lse0.shape == (2, 8, n_q) and not z.isnan().any()
    torch.testing.assert_close(lse, lse0, atol=1e-4, rtol=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(z.float(), z0.float(), atol=tol, rtol=tol)
    if hidden and causal:
        assert not z[:, :, :hidden].any() and not lse[:, :, :hidden].any()


def test_a_bfloat16_lean_trace_of_a_long_input_sums_to_one(llama, tmp_path) -> None:
    # The fused kernel's log-sum-exp makes the recomputed weights of a bfloat16 trace rows that
    # sum to 1 and masked cells exactly 0, close to the float32 CPU trace's.
    import attnviz.engine.budget as budget_module

    cpu, _ = llama
    cpu.model.save_pretrained(tmp_path)
    cpu.tokenizer.save_pretrained(tmp_path)
    half = load_model(str(tmp_path), device=DEVICE, dtype="bfloat16")
    text = " ".join([TEXT] * 50)  # ~600 tokens
    os.environ["ATTNVIZ_FULL_TRACE_BYTES"] = "1"
    budget_module.budget.cache_clear()
    try:
        a, b = trace_model(cpu, text), trace_model(half, text)
    finally:
        del os.environ["ATTNVIZ_FULL_TRACE_BYTES"]
        budget_module.budget.cache_clear()
    assert b.meta["lean"] and b.layers[0].stored("q").dtype == torch.bfloat16
    for la, lb in zip(a.layers, b.layers, strict=True):
        w = lb.weights  # [head, q, k] float32 on the CPU
        assert not torch.isnan(w).any() and (w.masked_select(~lb.mask) == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-4, rtol=0)
        torch.testing.assert_close(w, la.weights, atol=3e-2, rtol=0)
