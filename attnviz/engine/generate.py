"""Attention while a decoder generates: each new token's row in every layer and head, step by step.

One forward per step through the model's own KV cache (transformers' DynamicCache), with the same
per-call knobs and recorder as `trace_model` (attnviz.engine.hooked.intercept): nothing is patched
and nothing per-call lives on the model. Step t feeds the token at position p + t - 1 (p: prompt
length; step 0 is the prompt itself) and records that query's row over every key so far; the
test suite checks each row against a fresh `trace_model` of prompt + t tokens (within 1e-5) and
the cached path against a no-cache path that reruns the whole sequence each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnviz.engine import validate
from attnviz.engine.budget import budget, longest_input, size
from attnviz.engine.errors import EmptyInput
from attnviz.i18n import Message

MAX_NEW_TOKENS = 128  # tokens one run may generate (the page offers up to this)
MAX_TOP_K = 1000
SAMPLE_TEMPERATURE_RANGE = (0.05, 5.0)
SHOWN_CANDIDATES = 5  # the most likely next tokens kept per step


@dataclass(frozen=True)
class Sampling:
    """How the next token is picked. Greedy takes the most likely; otherwise it is drawn from
    softmax(logits / temperature) over the top_k most likely (0: all), with a seeded generator,
    so the same settings give the same run."""

    greedy: bool = True
    temperature: float = 1.0  # of the next-token distribution, not of attention
    top_k: int = 0  # 0: every token may be drawn
    seed: int = 0

    def __post_init__(self) -> None:
        validate.flag("greedy", self.greedy)
        lo, hi = SAMPLE_TEMPERATURE_RANGE
        validate.number("sampling temperature", self.temperature, lo, hi)
        validate.whole("top_k", self.top_k, 0, MAX_TOP_K)
        validate.whole("seed", self.seed, 0, 2**31 - 1)


@dataclass(frozen=True)
class WhatIf:
    """The attention knobs applied at every step of the run (as in trace_model)."""

    use_scale: bool = True
    temperature: float = 1.0  # attention logits are divided by it
    ablate: frozenset[tuple[int, int]] = frozenset()  # (layer, head) whose z is zeroed

    def __post_init__(self) -> None:
        use_scale, temperature, ablate, _ = validate.knobs(
            self.use_scale, self.temperature, self.ablate, ()
        )
        object.__setattr__(self, "use_scale", use_scale)
        object.__setattr__(self, "temperature", temperature)
        object.__setattr__(self, "ablate", ablate)


@dataclass(frozen=True)
class Step:
    """One forward of the run.

    | field      | shape / type          | meaning                                              |
    |------------|-----------------------|------------------------------------------------------|
    | position   | int                   | the query's position (the token fed at this step)    |
    | weights    | [layer, head, n_k]    | that query's attention row, n_k = position + 1       |
    | scale      | [layer]               | the factor applied to q·k in each layer              |
    | next_id    | int                   | the token chosen after it                            |
    | p_next     | float                 | its probability (after sampling temperature, top_k)  |
    | top        | [(id, p), ...]        | the most likely next tokens, most likely first       |
    | kv_bytes   | int                   | bytes of keys and values in the cache after the step |
    """

    position: int
    weights: torch.Tensor
    scale: tuple[float, ...]
    next_id: int
    p_next: float
    top: tuple[tuple[int, float], ...]
    kv_bytes: int


@dataclass
class Generation:
    """A whole run: the prompt, the generated tokens and one Step per forward."""

    ids: list[int]  # prompt + generated token ids
    tokens: list[str]  # the same, as the tokenizer's tokens
    n_prompt: int
    steps: list[Step]
    source: str  # the model's name
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    sampling: Sampling
    what_if: WhatIf
    cache: bool  # True: one token per forward through the KV cache
    stopped: str = "length"  # "length", or "eos" when the model produced its end token
    # each token's text: they join into the decoded text (a character split over byte pieces on
    # its first piece, '' on the rest)
    texts: list[str] = field(default_factory=list)

    @property
    def generated(self) -> list[int]:
        return self.ids[self.n_prompt :]

    def row(self, step: int, layer: int, head: int) -> torch.Tensor:
        """The query's weights over keys 0..position at `step`. [n_k]"""
        return self.steps[step].weights[layer, head]

    def sink(self, step: int) -> torch.Tensor:
        """Weight on the first token, per layer and head, at `step`. [layer, head]"""
        return self.steps[step].weights[:, :, 0]

    def nbytes(self) -> int:
        return sum(s.weights.numel() * 4 for s in self.steps)


MAX_CONTEXT = 512  # tokens of prompt and generation together (a page of text)


def generation_bytes(n_layers: int, n_heads: int, n_prompt: int, n_new: int) -> int:
    """What a run keeps: one float32 row per layer, head and step, rows growing by one key."""
    keys = sum(n_prompt + t for t in range(n_new))  # n_k over the steps
    return 4 * n_layers * n_heads * keys


def _cache_bytes(cache) -> int:
    """Bytes of every key and value tensor the cache holds (measured, not from a formula)."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def prompt_ids(model, prompt: str) -> list[int]:
    """The prompt as the model reads it: its tokenizer's ids with the start token it adds, less
    a trailing end or separator token (a BERT-style tokenizer closes every text with [SEP]; a
    decoder continuing the text must not see it)."""
    prompt = validate.text("prompt", prompt)
    if not prompt.strip():
        raise EmptyInput(Message("gen.err.empty"))
    from attnviz.engine.hooked.encoding import one_bos  # transformers: loaded with the model

    prompt = one_bos(model, prompt)  # a template's own BOS: the tokenizer adds one already
    tok = model.call_tokenizer
    with model.call_lock:
        ids = tok(prompt, truncation=True, max_length=model.max_length)["input_ids"]
    closing = {getattr(model.tokenizer, a, None) for a in ("sep_token_id", "eos_token_id")}
    if len(ids) > 1 and ids[-1] in closing - {None}:
        ids = ids[:-1]
    return list(ids)


def _unknown_id(tokenizer) -> int | None:
    """The tokenizer's unknown token, which is not text and is never chosen (a character model
    maps every rare character to it, and greedy decoding then writes [UNK] after [UNK]); None
    when there is none or it doubles as the end-of-text token (GPT-2)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    return None if unk is None or unk == getattr(tokenizer, "eos_token_id", None) else unk


def _pick(
    logits: torch.Tensor, sampling: Sampling, gen: torch.Generator, banned: int | None = None
):
    """(chosen id, its probability, the top candidates) from the logits after the last token;
    `banned` (the unknown token) gets probability 0 and the rest are renormalised."""
    logits = logits.float().cpu()  # [vocab]
    if banned is not None:
        logits = logits.clone()
        logits[banned] = float("-inf")
    if sampling.greedy:
        probs = torch.softmax(logits, -1)  # [vocab]
        chosen = int(torch.argmax(probs))
    else:
        scaled = logits / sampling.temperature  # [vocab]
        if 0 < sampling.top_k < scaled.shape[0]:
            cut = torch.topk(scaled, sampling.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < cut, float("-inf"))
        probs = torch.softmax(scaled, -1)  # [vocab]
        chosen = int(torch.multinomial(probs, 1, generator=gen))
    p, ids = torch.topk(probs, min(SHOWN_CANDIDATES, probs.shape[0]))
    top = tuple((int(i), float(q)) for i, q in zip(ids, p, strict=True))
    return chosen, float(probs[chosen]), top


def _check(model, n_prompt: int, n_new: int, what_if: WhatIf) -> None:
    if model.kind != "decoder":
        raise ValueError(
            f"{model.name!r} is an {model.kind}: only a decoder (GPT-2, Llama, Qwen, ...) "
            f"generates text; load one"
        )
    if n_prompt + n_new > model.max_length:
        raise ValueError(Message(
            "gen.err.model_length", n_prompt=n_prompt, n_new=n_new, most=model.max_length
        ))  # fmt: skip
    for layer, head in sorted(what_if.ablate):
        if not (0 <= layer < model.n_layers and 0 <= head < model.n_heads):
            raise ValueError(
                f"ablate=({layer}, {head}) is outside the model: layers 0..{model.n_layers - 1}, "
                f"heads 0..{model.n_heads - 1}"
            )
    # The prompt's first forward runs the whole prompt at once, with every head's attention
    # recorded: an 8,000-token prompt on SmolLM2 kept 138 MB of rows but took 19 GB in that
    # forward, 1,586 tokens 7.2 GB. A prompt and its new tokens fit MAX_CONTEXT and what this
    # server traces of the model.
    longest = min(MAX_CONTEXT, longest_input(model))
    if n_prompt + n_new > longest:
        raise ValueError(Message(
            "gen.err.server_length", n_prompt=n_prompt, n_new=n_new, most=longest
        ))  # fmt: skip
    need, limit = generation_bytes(model.n_layers, model.n_heads, n_prompt, n_new), budget()
    if need > limit.max_trace_bytes:
        raise ValueError(Message(
            "gen.err.rows", n_new=n_new, n_prompt=n_prompt, need=size(need),
            limit=size(limit.max_trace_bytes),
        ))  # fmt: skip


def generate(
    model,
    prompt: str,
    n_new: int = 20,
    sampling: Sampling | None = None,
    what_if: WhatIf | None = None,
    cache: bool = True,
) -> Generation:
    """Generate `n_new` tokens after `prompt` with a loaded decoder (attnviz.load_model) and record,
    at every step, the new query's attention row in every layer and head and the KV cache's size.

    `sampling`: greedy (default) or sampled with temperature / top_k, seeded. `what_if`: the
    attention knobs (no ÷√d_head, temperature, silenced heads) at every step. `cache=False` reruns
    the whole sequence at each step instead of using the KV cache (slower; the same rows: the
    check of the cached path). Stops early at the model's end token."""
    from attnviz.engine.hooked.labels import token_labels, token_texts

    sampling = sampling or Sampling()
    what_if = what_if or WhatIf()
    n_new = validate.whole("n_new", n_new, 1, MAX_NEW_TOKENS)
    validate.flag("cache", cache)
    ids = prompt_ids(model, prompt)
    _check(model, len(ids), n_new, what_if)
    ids, steps, stopped = _decode(model, ids, n_new, sampling, what_if, cache)
    with model.call_lock:
        tokens = token_labels(model.tokenizer, ids)  # byte pieces read as characters
        texts = token_texts(model.tokenizer, ids)
    return Generation(
        ids=ids,
        tokens=tokens,
        n_prompt=len(ids) - len(steps),
        steps=steps,
        source=model.name,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        n_kv_heads=model.blocks[0].n_kv_heads,
        d_head=model.d_head,
        sampling=sampling,
        what_if=what_if,
        cache=cache,
        stopped=stopped,
        texts=texts,
    )


def _decode(
    model, ids: list[int], n_new: int, sampling: Sampling, what_if: WhatIf, cache: bool
) -> tuple[list[int], list[Step], str]:
    """The generation loop: one forward a step with every layer's attention recorded, the next
    token picked. Returns the ids (prompt and new), the steps, and why it stopped."""
    from attnviz.engine.hooked.intercept import Call, Recording
    from attnviz.engine.request import Knobs

    knobs = Knobs(
        use_scale=what_if.use_scale, temperature=what_if.temperature, ablate=what_if.ablate
    )
    blocks = {id(b.attention): i for i, b in enumerate(model.blocks)}
    dev = torch.device(model.device)
    gen = torch.Generator().manual_seed(sampling.seed)
    unknown = _unknown_id(model.tokenizer)
    eos = getattr(model.tokenizer, "eos_token_id", None)
    steps: list[Step] = []
    with torch.inference_mode():
        past = None
        if cache:
            from transformers import DynamicCache

            past = DynamicCache(config=model.model.config)
        fed = ids  # what the next forward reads
        for _ in range(n_new):
            record = Recording(blocks=blocks)
            x = torch.tensor([fed], device=dev)  # [1, n_fed]
            out = model.model(
                input_ids=x, past_key_values=past, use_cache=cache, attnviz_call=Call(knobs, record)
            )
            picked = _pick(out.logits[0, -1], sampling, gen, unknown)
            steps.append(_step(model, record, len(ids) - 1, past, picked))
            ids = ids + [picked[0]]
            fed = [picked[0]] if cache else ids
            if eos is not None and picked[0] == eos:
                return ids, steps, "eos"
    return ids, steps, "length"


def _step(model, record, position: int, past, picked: tuple) -> Step:
    """One step's record: the new query's attention rows, the KV cache's bytes (`past`, or what
    one would hold: the keys and values of every position) and the token picked."""
    layers = [record.layers[i] for i in range(model.n_layers)]
    rows = torch.stack([r.weights[0, :, -1] for r in layers])  # [layer, head, n_k]
    if past is not None:
        kv_bytes = _cache_bytes(past)
    else:
        kv_bytes = sum(2 * r.k[0].numel() * r.k.element_size() for r in record.layers.values())
    chosen, p, top = picked
    return Step(
        position=position,
        weights=rows.float().cpu(),
        scale=tuple(float(r.scale) for r in layers),
        next_id=chosen,
        p_next=p,
        top=top,
        kv_bytes=kv_bytes,
    )


TRAINED_DECODER = (
    "attnviz-char-zh-en"  # what the Generate page loads with no name (attnviz.bundled_models)
)
