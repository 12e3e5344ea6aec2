"""Training the models attnviz ships: plain PyTorch, CPU or GPU, seeded.

`corpus` reads Debian's fortune texts (each file recorded by size and sha256), `chars` makes the
character-level tokenizer in the Hugging Face format, `model` the Llama config (RoPE, GQA),
`loop` trains, `save` writes a folder load_model reads, `scoring` measures next-character
accuracy and loss against unigram and bigram baselines, `lab` trains a tiny model live for the
lab page (an induction head forming). scripts/make_models.py runs them.

May import: attnviz.engine, attnviz.i18n, torch, transformers. Never measures, lessons, views,
serve, ui or streamlit; the runtime (engine) never imports training.
"""
