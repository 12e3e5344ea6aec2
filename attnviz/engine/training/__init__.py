"""Training the models attnviz ships: plain PyTorch, CPU or GPU, seeded.

`corpus` reads Debian's fortune texts (each file recorded by size and sha256), `chars` makes the
character-level tokenizer in the Hugging Face format, `model` the Llama config (RoPE, GQA),
`loop` trains, `save` writes a folder load_model reads, `scoring` measures next-character
accuracy and loss against unigram and bigram baselines. scripts/make_models.py runs them.
"""
