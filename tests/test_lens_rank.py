"""logit_lens's final_rank on logits, against a float64 oracle: where float32's softmax rounds
most of the vocabulary to exactly 0, counting probabilities ranked the model's token among the
few that were not 0 (SmolLM2's embeddings: 623 where the true rank is 12,919)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from attnviz.engine.bundled import registry_file
from attnviz.engine.hooked import load_model, resolve, trace_model
from attnviz.measures.lens import logit_lens
from tests.writes_models import CONFIGS, _randomise

TEXT = "the cat sat on the mat and then it slept"
SPREAD = 5000.0  # the unembedding times this: logits hundreds apart, so exp() underflows


def oracle_ranks(states: list[torch.Tensor], norm, head: torch.Tensor, final: int) -> list[int]:
    """Each state's rank of `final` in float64: the logits above it, plus 1."""
    ranks = []
    for s in states:
        logits = head.double() @ norm(s).double()  # [vocab]
        ranks.append(int((logits > logits[final]).sum()) + 1)
    return ranks


@pytest.fixture(scope="module")
def spread_llama(tmp_path_factory):
    """A tiny random Llama whose unembedding is scaled up: its lens probabilities underflow."""
    folder = tmp_path_factory.mktemp("spread_llama")
    torch.manual_seed(0)
    config = CONFIGS["llama"]()
    config.tie_word_embeddings = False  # only the unembedding spreads, not the embeddings
    model = AutoModelForCausalLM.from_config(config)
    _randomise(model)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(SPREAD)
        # the last MLP decides the prediction, so the earlier rows rank it anywhere
        model.model.layers[-1].mlp.down_proj.weight.mul_(50.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve(None)[0]).save_pretrained(folder)
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    return load_model(str(folder), device="cpu"), eager.eval().requires_grad_(False)


def test_final_rank_is_the_float64_logit_rank_where_probabilities_underflow(spread_llama):
    model, eager = spread_llama
    lens = logit_lens(model, trace_model(model, TEXT), k=3)
    ids = model.call_tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = eager(input_ids=ids, output_hidden_states=True)
    final = int(out.logits[0, -1].argmax())
    head = eager.get_output_embeddings().weight
    states = [s[0, -1] for s in out.hidden_states[:-1]]
    want = oracle_ranks(states, eager.model.norm, head, final)
    assert list(lens.final_rank)[:-1] == want
    assert lens.final_rank.iloc[-1] == 1
    # the case this test is for: float32 probabilities of 0, which the old count skipped
    probs = torch.softmax(torch.stack([head @ eager.model.norm(s) for s in states]), -1)
    zeros = (probs == 0).sum(-1)  # [layer]
    assert bool((zeros > 0).any()), "no probability underflowed: raise SPREAD"
    old = [int((p > p[final]).sum()) + 1 for p in probs]
    print(f"final_rank {want}; counting float32 probabilities: {old}; zeros {zeros.tolist()}")
    assert old != want, "the float32 count agrees with the oracle: the test shows nothing"


def test_final_rank_on_smollm2_is_the_logit_rank():
    """SmolLM2-135M, where installed: the embeddings' row underflows for 48,530 of 49,152."""
    if registry_file("smollm2-135m") is None:
        pytest.skip("smollm2-135m is not installed here (`attnviz models smollm2-135m`)")
    model = load_model("smollm2-135m", device="cpu")
    text = "The animal didn't cross the street because it was too tired"
    lens = logit_lens(model, trace_model(model, text), k=3)
    ids = model.call_tokenizer(text, return_tensors="pt")["input_ids"]
    hf = model.model
    with torch.inference_mode():
        out = hf(input_ids=ids, output_hidden_states=True)
    final = int(out.logits[0, -1].argmax())
    states = [s[0, -1] for s in out.hidden_states[:-1]]
    head = hf.get_output_embeddings().weight
    want = oracle_ranks(states, hf.model.norm, head, final)
    assert list(lens.final_rank)[:-1] == want
    print(f"SmolLM2 final_rank by layer: {list(lens.final_rank)}")
