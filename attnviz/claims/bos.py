"""The BOS check: a GGUF model traced by attnviz starts with at most one beginning-of-sequence
token, on plain text and on a chat prompt. The pitfall (a base GGUF with add_bos_token plus a
template's own bos_token gives two) would distort every sink figure.

The chat prompt is the model's own chat template where its GGUF carries one (rendered by
transformers' apply_chat_template, as a chat front end does); where it carries none, the model
family's usual template, written out (Gemma 3's starts with its bos_token), so that the pitfall is
measured rather than assumed away. Both are traced as attnviz traces any text."""

from __future__ import annotations

import time

from attnviz.claims.record import Record, verdict
from attnviz.claims.setting import Setting, command, link
from attnviz.engine.bundled import gguf_path
from attnviz.engine.hooked import trace_model
from attnviz.engine.hooked.gguf_header import read_header
from attnviz.engine.hooked.loading import LoadedModel

SOURCE = "the Gemma 3 GGUF pitfall (llama.cpp's double-BOS warning: add_bos_token + a template's "
SOURCE += "own {{ bos_token }})"
USER = "Why do attention heads look at the first token?"
# Gemma 3's chat template (google/gemma-3-270m-it), one user turn, for a GGUF that carries none
GEMMA_TURN = "{bos}<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"


def template_of(name: str) -> str | None:
    """The chat template the model's GGUF file carries, or None (no file, or no template)."""
    try:
        path = gguf_path(name)
    except (KeyError, ValueError):
        return None
    if path is None or not path.is_file():
        return None
    return read_header(path).metadata.get("tokenizer.chat_template")


def chat_prompt(model: LoadedModel, name: str) -> tuple[str, str]:
    """(the prompt, where its template came from)."""
    template = template_of(name)
    if template is not None:
        messages = [{"role": "user", "content": USER}]
        text = model.tokenizer.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=True
        )
        return text, "the GGUF's own chat template"
    bos = model.tokenizer.bos_token or ""
    return GEMMA_TURN.format(
        bos=bos, text=USER
    ), "none in the GGUF: Gemma 3's template, written out"


def leading_bos(model: LoadedModel, text: str) -> tuple[int, list[str]]:
    """How many BOS tokens the trace of `text` starts with, and its first four tokens."""
    trace = trace_model(model, text)
    bos = model.tokenizer.bos_token_id
    n = 0
    while n < len(trace.token_ids) and bos is not None and trace.token_ids[n] == bos:
        n += 1
    return n, trace.tokens[:4]


def one_bos(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    start = time.perf_counter()
    plain, plain_first = leading_bos(model, USER)
    prompt, origin = chat_prompt(model, name)
    chat, chat_first = leading_bos(model, prompt)
    adds = bool(model.tokenizer(USER)["input_ids"][:1] == [model.tokenizer.bos_token_id])
    ok = plain <= 1 and chat <= 1
    v, reason = verdict(ok, (
        f"plain text starts with {plain} BOS ({model.tokenizer.bos_token!r}), the chat prompt "
        f"({origin}) with {chat}; criterion: at most one each"
    ), (
        f"the chat prompt ({origin}) starts with {chat} BOS tokens {chat_first[:chat]}: the "
        f"tokenizer adds one and the template writes its own (plain text: {plain})"
    ))  # fmt: skip
    return Record(
        claim="bos",
        statement="A GGUF model traced by attnviz starts with one BOS at most, on plain text and "
        "on a chat prompt (no doubled <bos> to distort sink figures).",
        source=SOURCE,
        model=name,
        numbers={
            "plain_leading_bos": plain,
            "chat_leading_bos": chat,
            "tokenizer_adds_bos": adds,
            "bos_token": model.tokenizer.bos_token,
            "plain_first_tokens": " ".join(plain_first),
            "chat_first_tokens": " ".join(chat_first),
            "template": origin,
        },
        verdict=v,
        reason=reason,
        command=command("bos", name),
        paper={"bos_tokens": 1},
        link=link("pretrained", pick=name, view="overview", text=prompt),
        seconds=time.perf_counter() - start,
    )
