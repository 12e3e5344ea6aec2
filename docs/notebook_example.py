# %% [markdown]
# # attnviz in a notebook
#
# The engine and the app's figures without the app: trace a sentence, then draw any view with
# `attnviz.show`. Runs offline. Each `# %%` starts a cell (VS Code, PyCharm and Jupytext open this
# file as a notebook); run as a script it writes the figures as HTML files to
# `$ATTNVIZ_EXAMPLE_OUT` (default: a temporary folder) and prints what it found.
#
# tests/test_notebook.py runs this file.

# %%
import os
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

import attnviz
from attnviz.engine.hooked import resolve
from attnviz.engine.next_token import top_k

out = Path(os.environ.get("ATTNVIZ_EXAMPLE_OUT") or tempfile.mkdtemp(prefix="attnviz-"))
out.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. The bundled BERT (all-MiniLM-L6-v2)

# %%
bert = attnviz.load_model()  # offline: the weights ship in a Python package
trace = attnviz.trace_model(bert, "The animal didn't cross the street because it was too tired")
print(f"{trace.n_layers} layers x {trace.n_heads} heads, tokens: {trace.tokens}")

fig = attnviz.show(trace, view="overview", layer=5, head=11)
fig.write_html(out / "bert_overview.html")
scores, logits, weights = attnviz.show(trace, view="detail", layer=5, head=11)
weights.write_html(out / "bert_detail_weights.html")

it, animal = trace.tokens.index("it"), trace.tokens.index("animal")
link = attnviz.show(trace, view="link", query=it, key=animal)
link.write_html(out / "bert_link.html")
print(
    "it -> animal, strongest head weight:", round(float(trace.weights()[:, :, it, animal].max()), 3)
)

# %% [markdown]
# ## 2. A decoder with grouped-query attention and RoPE
#
# A tiny random Llama built from its config (no download), saved with the bundled tokenizer.
# With a real checkpoint, pass its folder or Hub id to `load_model` instead.

# %%
folder = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=30522,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,  # GQA: 4 query heads per K/V head
    max_position_embeddings=128,
)
AutoModelForCausalLM.from_config(config).save_pretrained(folder)
AutoTokenizer.from_pretrained(resolve(None)[0]).save_pretrained(folder)

llama = attnviz.load_model(str(folder))
base = attnviz.trace_model(llama, "the cat sat on the mat")
layer = base.layers[0]
print(f"q {tuple(layer.q.shape)}, k {tuple(layer.k.shape)} (unexpanded), mask causal:",
      bool(torch.equal(layer.mask, layer.mask.tril())))  # fmt: skip

# %% [markdown]
# Silence two heads and compare the next-token prediction with the unchanged model.

# %%
cut = attnviz.trace_model(llama, "the cat sat on the mat", ablate=[(1, 0), (1, 1)])
for row in top_k(cut, lambda i: llama.tokenizer.decode([i]), k=5, base=base):
    print(f"{row.token!r:>12}  p={row.p:.3e}  unchanged={row.p_base:.3e}  Δ={row.delta:+.1e}")
attnviz.show(cut, view="detail", layer=1, head=0)[2].write_html(out / "llama_silenced_head.html")

print("figures written to", out, sorted(p.name for p in out.glob("*.html")))
