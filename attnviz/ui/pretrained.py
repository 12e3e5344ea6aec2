"""Widgets for a pretrained model of any family: what was loaded, which attention of an
encoder-decoder to look at, the heads to silence, and a decoder's next-token prediction."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.hooked.labels import piece_text
from attnviz.engine.trace import Trace
from attnviz.measures.next_token import top_k
from attnviz.ui import markup, url
from attnviz.ui.language import said, t
from attnviz.ui.widgets import chart, token_legend
from attnviz.views import charts, spec
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from attnviz.views.tokens import shown

PARTS = url.key("part").options
PREFIX = {"encoder": "E", "decoder": "D", "cross": "X"}  # heads of an encoder-decoder: E0H3
LAST_MODEL = "pm_last_model"  # not a widget key: it outlives a page switch


def summary(model) -> None:
    """One line: the family, its kind, and its shape (with the K/V grouping). Remembers the
    model for this session when it shares K/V (GQA or MQA), so the MHA·MQA·GQA page can show
    its real grouping."""
    if model.n_kv_heads is not None and model.n_kv_heads < model.n_heads:
        st.session_state[LAST_MODEL] = model.name
    kv = model.n_kv_heads or model.n_heads
    grouping = "MHA" if kv == model.n_heads else ("MQA" if kv == 1 else "GQA")
    st.caption(
        t(
            "pm.summary",
            family=markup.code(model.model_type),  # config.model_type, a code name
            kind=t(f"pm.kind.{model.kind}"),
            layers=model.n_layers,
            heads=model.n_heads,
            kv=kv,
            grouping=grouping,
            d=model.d_head,
            dtype=str(model.model.dtype).removeprefix("torch."),
        )
    )


def head_choices(model) -> dict[str, tuple[int, int]]:
    """Label -> (layer as `ablate` counts it, head). L2H5 for one stack; E/D/X2H5 for the
    encoder, decoder and cross blocks of an encoder-decoder."""
    choices = {}
    for i, block in enumerate(model.blocks):
        prefix = PREFIX[block.part] if model.kind == "encoder-decoder" else "L"
        for h in range(block.n_heads):
            choices[f"{prefix}{block.layer}H{h}"] = (i, h)
    return choices


def pick_part(model) -> str:
    """Which attention of an encoder-decoder to draw; the only one of any other model."""
    if model.kind != "encoder-decoder":
        return model.blocks[0].part
    url.seed("part", list(PARTS), url.default("part"))
    part = st.segmented_control(
        t("pm.part"), PARTS, format_func=lambda p: t(f"pm.part.{p}"), key="part"
    )
    url.sync("part", url.default("part"))
    st.caption(t("pm.part_help"))
    return part or "encoder"


def next_tokens(model, trace: Trace, base: Trace | None, k: int = 10) -> None:
    """The k most likely next tokens after the input; with `base`, beside the unchanged model's."""
    dec = trace.part("decoder") if trace.parts else trace
    if dec.next_logits is None:
        return
    base_dec = None if base is None else (base.part("decoder") if base.parts else base)
    rows = top_k(dec, lambda i: piece_text(model.tokenizer, i), k=k, base=base_dec)
    last = dec.tokens[-1]  # drawn as the candidates are ("Ġtired" and " tired" read ␣tired)
    if dec.token_ids:
        last = piece_text(model.tokenizer, dec.token_ids[-1])
    with spec.making_specs():  # ready JSON: no go.Figure made and copied for every sentence
        fig = charts.next_tokens(
            rows,
            title=t("pm.next_title", token=spec.escape([last])[0]),
            now_label=t("pm.next_now") if base_dec is not None else "p",
            base_label=t("pm.next_base"),
        )
    left, right = st.columns([3, 2], vertical_alignment="center")
    with left:
        chart(fig, key="next_tokens")
        token_legend([last, *(r.token for r in rows)])
    with right:
        _next_caption(rows, base_dec is not None)


def _next_caption(rows, compared: bool) -> None:
    if compared:
        top, top_base = rows[0], min(rows, key=lambda r: r.rank_base or 0)
        st.caption(
            t(
                "pm.next_diff",
                now=markup.escape(shown(top.token)),
                p=top.p,
                was=markup.escape(shown(top_base.token)),
                p_was=top_base.p_base,
                p_now=top_base.p,
            )
        )
    else:
        st.caption(t("pm.next_help"))


def grouping_section(text: str) -> None:
    """The MHA·MQA·GQA page's part about a real model: its grouping, its K per kv head, a live
    check that expanding K reproduces its weights, and what the grouping saves in the cache."""
    from attnviz.engine.grouping import expanded_error, mode
    from attnviz.lessons.costs import kv_cache_bytes
    from attnviz.lessons.sharing import kv_head_of
    from attnviz.ui import models

    st.subheader(t("pm.gqa_title"))
    fresh = not any(k in st.session_state or url.present(k) for k in ("sh_pick", "sh_model"))
    if fresh:  # the last model with shared K/V loaded on the Pretrained page: picked, or typed
        last = st.session_state.get(LAST_MODEL, "")
        st.session_state["sh_pick" if last in url.key("sh_pick").options else "sh_model"] = last
    name = models.pick_model(
        "sh_pick", "sh_model", t("pm.gqa_pick"), t("pm.gqa_model"), "decoder", t("pm.gqa_no")
    )
    if not name.strip():
        st.caption(t("pm.gqa_none"))
        return
    if models.not_installed(name.strip()):  # a registry LLM before `attnviz models`
        return
    model = models.get_model(name.strip(), "auto")
    if model is None:
        return
    h, kv = model.n_heads, model.n_kv_heads or model.n_heads
    st.markdown(
        t(
            "pm.gqa_mode",
            name=markup.escape(model.name),
            mode=mode(h, kv),
            h=h,
            kv=kv,
            g=h // kv,
            layers=model.n_layers,
        )
    )
    kv_of = kv_head_of(h, kv)
    chart(charts.sharing_diagram(kv_of, q_label=t("pg.heads"), kv_label=t("sh.kv")), key="real")
    try:
        trace = models.model_trace(model, models.request(model, text))
    except ValueError as err:
        st.info(markup.escape(said(err)))
        return
    if trace.parts:  # an encoder-decoder: the decoder's self-attention is where GQA would be
        trace = trace.part("decoder")
    layer = st.slider(t("pm.gqa_layer"), 0, trace.n_layers - 1, 0, key="sh_real_layer")
    lt = trace.layers[layer]
    m1, m2, m3 = st.columns(3)
    n = 4096
    m1.metric(t("pm.gqa_check"), f"{expanded_error(lt):.1e}")
    for col, label, heads in ((m2, t("pm.gqa_cache", n=n), kv), (m3, t("pm.gqa_cache_mha"), h)):
        mib = kv_cache_bytes(model.n_layers, heads, model.d_head, n, bytes_per_value=4) / 2**20
        col.metric(label, f"{mib:,.0f} MiB")
    st.caption(t("pm.gqa_check_help", kv=kv, h=h, d=model.d_head, g=h // kv))
    shown = min(kv, 8)
    cols = st.columns(min(shown, 4))
    for g in range(shown):
        heads = ", ".join(str(q) for q in range(h) if kv_of[q] == g)
        k = lt.head("k", g)  # [k, d_head]
        fig = draw_map(
            k, Axis.dims(k.shape[-1], t("w.dim"), ticks=8),
            Axis(trace.key_tokens, t("w.key"), ticks=8), Colour.diverging("k", show_bar=False),
            Marks(),
            Frame(t("pm.gqa_k_title", l=layer, g=g, heads=heads), 320),
        )  # fmt: skip
        with cols[g % len(cols)]:
            chart(fig, key=f"real_k_{g}")


UPLOAD_TYPES = ("txt", "md")


def document() -> str | None:
    """A long document pasted or uploaded (.txt / .md) in place of the sidebar's sentence, or
    None. Checked here: at most the server's max_text_chars characters, UTF-8; the text is only
    ever tokenized and drawn escaped, never rendered as Markdown."""
    from attnviz.engine.budget import budget

    most = budget().max_text_chars
    with st.expander(t("long.title"), expanded=bool(st.session_state.get("long_doc"))):
        st.caption(t("long.help", chars=most))
        upload = st.file_uploader(
            t("long.upload", chars=most), type=list(UPLOAD_TYPES), key="long_file"
        )  # its own "Limit ... per file" is the server's byte cap (.streamlit/config.toml)
        pasted = st.text_area(t("long.paste"), key="long_doc", height=140, max_chars=most)
    if upload is not None:
        if upload.size > 4 * most:  # UTF-8: at most 4 bytes a character
            st.warning(t("long.too_big", name=markup.escape(upload.name), chars=most))
            return None
        try:
            text = upload.getvalue().decode("utf-8")
        except UnicodeDecodeError:
            st.warning(t("long.not_utf8", name=markup.escape(upload.name)))
            return None
        if len(text) > most:
            st.warning(t("long.too_big", name=markup.escape(upload.name), chars=most))
            return None
        return text if text.strip() else None
    return pasted if pasted and pasted.strip() else None


def length_note(model, trace: Trace) -> None:
    """How many tokens were traced, what this server's budget allows for this model, what was
    cut and why, and (long inputs) how the trace is kept: never a silent cut."""
    from attnviz.engine.budget import size

    n, total, limit = len(trace.tokens), trace.n_input_tokens, trace.meta.get("max_length", 0)
    reason = t(f"long.reason.{trace.meta.get('limit_reason', 'model')}")
    line = t("long.count", n=n, limit=limit, reason=reason)
    if trace.truncated:
        st.warning(line + " " + t("long.cut", total=total, cut=total - n, limit=limit))
    else:
        st.caption(line)
    kept = trace.kept_bytes()  # a long input's trace, kept without its n x n maps
    if kept is not None:
        st.caption(t("long.lean", kept=size(kept[0]), full=size(kept[1])))
