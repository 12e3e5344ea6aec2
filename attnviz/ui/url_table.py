"""Every URL key attnviz reads or writes: its pages, type, default, range and how it gets into the
URL (attnviz.ui.url reads and writes them; its docstring says how). One table, so a link means
the same everywhere and a test can check that the code names no key outside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnviz.engine.bundled import registry_file
from attnviz.engine.generate import TRAINED_DECODER
from attnviz.engine.hooked.families import DEFAULT_NAME
from attnviz.i18n import examples, translate
from attnviz.views import registry
from attnviz.views.colour import SCALES
from attnviz.views.lines import default_threshold
from attnviz.views.panels import default_scale

ALL = ("*",)  # a key every page reads (the sidebar's)
EXPLORER = ("playground", "pretrained")  # the explorer's views, on both pages that draw them
BIND = "query-params"


@dataclass(frozen=True)
class Key:
    name: str
    pages: tuple[str, ...]  # page names (the file stem of attnviz/app_pages/<page>.py) or ALL
    kind: str  # "bool", "int", "float", "text", "choice", "list"
    default: Any  # the value without the key; a function of keyword context, or None
    how: str = "widget"  # "widget", "value" or "read" (see the module docstring)
    options: tuple = ()  # a choice's values (what a "list" holds, where fixed)
    lo: float | None = None  # the smallest number a link may ask for
    hi: float | None = None  # the largest
    doc: str = ""  # what it holds, in one line
    aliases: tuple[str, ...] = ()  # older names a link may still carry (read as this key)
    always: bool = False  # written even at its default (see the module docstring)

    def __post_init__(self) -> None:
        if self.kind not in ("bool", "int", "float", "text", "choice", "list"):
            raise ValueError(f"{self.name}: kind={self.kind!r} is not a URL key kind")
        if self.how not in ("widget", "value", "read"):
            raise ValueError(f"{self.name}: how={self.how!r} is not widget, value or read")


def _view_default(page: str) -> str:
    return {"playground": "heads", "pretrained": "overview"}[page]


# The bundled models a picker offers (attnviz.engine.bundled), in this order only so that a
# test's "another value" is a small model (tests/test_url_table.py); the pickers list them in
# bundled_models() order.
_PICKS = (DEFAULT_NAME, "smollm2-135m", TRAINED_DECODER, "gemma-3-270m")
_DECODER_PICKS = ("gemma-3-270m", "smollm2-135m", TRAINED_DECODER)
_DECODER_BY_LANG = {"en": "smollm2-135m", "zh": "gemma-3-270m"}
_SHARING_PICKS = ("smollm2-135m", TRAINED_DECODER, "gemma-3-270m")  # a test's other: the small one


def _first_decoder(lang: str = "en") -> str:
    """The Generate page's decoder: the registry LLM for the language where it is installed,
    else the one attnviz trained (it ships with attnviz)."""
    name = _DECODER_BY_LANG.get(lang, "smollm2-135m")
    return name if registry_file(name) is not None else TRAINED_DECODER


VIEWS = registry.NAMES  # the explorer's views, one registry (attnviz.views.registry)

TABLE = (
    # the sidebar, on every page
    Key("lang", ALL, "choice", "English", options=("English", "中文"), always=True,
        doc="UI language; a link may also say zh, zh-CN, cn, chinese or en (attnviz.i18n)"),
    Key("projector", ALL, "bool", False, doc="projector mode: bigger type everywhere"),
    Key("text", ALL, "text", lambda lang: next(iter(examples(lang).values())),
        doc="the sentence (default: the first example of the language; English on a page whose "
        "model reads no Chinese)"),
    Key("pair", ALL, "text", "", doc="a second sentence: cross-attention, or BERT's segment B"),
    Key("lesson", ALL, "text", "", "read",
        doc="set by a lesson's Previous / Next link (the stop it opens): the page starts from "
        "its own sentence in the lesson, not the last page's (dropped once read)"),
    # the Playground's stack
    Key("d_model", ("playground",), "choice", 64, "value", (8, 16, 32, 64, 128, 256, 512, 1024)),
    Key("dk_auto", ("playground",), "bool", True, doc="d_head = d_model / heads"),
    Key("d_head", ("playground",), "int", 16, lo=1, hi=1024, doc="d_head when dk_auto is off"),
    Key("heads", ("playground",), "int", 4, "value", lo=1, hi=32,
        doc="query heads: a divisor of d_model (any, with dk_auto off) that fits the budget"),
    Key("kv", ("playground",), "int", lambda heads: heads, "value", lo=1, hi=32,
        doc="K/V heads, a divisor of heads (default: heads, MHA; 1: MQA)"),
    Key("layers", ("playground",), "int", 1, lo=1, hi=6, doc="layers that fit the budget"),
    Key("scale", ("playground",), "bool", True, doc="divide q·k by √d_head"),
    Key("causal", ("playground",), "bool", False),
    Key("addnorm", ("playground",), "bool", False, doc="residual + LayerNorm"),
    Key("ffn", ("playground",), "bool", False, doc="a feed-forward sublayer"),
    Key("pos", ("playground",), "choice", "sinusoidal", "value", ("sinusoidal", "none")),
    Key("temp", ("playground",), "float", 1.0, lo=0.05, hi=20.0, doc="softmax temperature"),
    # the Pretrained-model page
    Key("pick", ("pretrained",), "choice", DEFAULT_NAME, "value", _PICKS,
        doc="a bundled model (attnviz.bundled_models()); a name in `model` goes first"),
    Key("model", ("pretrained",), "text", "",
        doc="a folder, .gguf file or Hub id; empty: the model of `pick`"),
    Key("device", ("pretrained",), "choice", "auto", "value", ("auto", "cpu", "cuda")),
    Key("dtype", ("pretrained",), "choice", "float32", "value", ("float32", "bfloat16", "auto")),
    Key("wi_scale", ("pretrained",), "bool", True, doc="what if: divide by √d_head",
        aliases=("b_scale",)),
    Key("wi_temp", ("pretrained",), "float", 1.0, lo=0.05, hi=20.0, doc="what if: temperature",
        aliases=("b_temp",)),
    Key("wi_silence", ("pretrained",), "list", (), doc="what if: silenced heads, L<layer>H<head>",
        aliases=("b_ablate",)),
    Key("wi_hide", ("pretrained",), "list", (), "value",
        doc="what if: hidden token positions (an older link's '3: the' reads as 3)",
        aliases=("b_mask",)),
    Key("part", ("pretrained",), "choice", "encoder", "value", ("encoder", "decoder", "cross"),
        doc="an encoder-decoder's attention to draw", aliases=("b_part",)),
    # the head atlas
    Key("rp_claims", ("reproduce",), "list", ("bos",), "value",
        doc="the Reproduce page's claims to measure again here"),
    Key("rp_models", ("reproduce",), "list", ("smollm2-135m",), "value",
        doc="the Reproduce page's models to measure them on"),
    Key("at_source", ("atlas",), "choice", "measure", "value", ("measure", "saved"),
        doc="texts measured here, or a corpus atlas saved by `attnviz atlas`"),
    Key("at_saved", ("atlas",), "text", "", "value",
        doc="a saved atlas's folder under ATTNVIZ_ATLAS_DIR (not in public mode)"),
    Key("at_role", ("atlas",), "choice", None, "value",
        ("induction", "duplicate_token", "previous_token", "self", "punctuation", "special",
         "first_token", "broad"),
        doc="the role whose example is shown (default: the head's first)"),
    Key("at_pick", ("atlas",), "choice", DEFAULT_NAME, "value", _PICKS,
        doc="a bundled model (as `pick`); a name in `at_model` goes first"),
    Key("at_model", ("atlas",), "text", "",
        doc="a folder, .gguf file or Hub id; empty: the model of `at_pick`"),
    Key("at_probes", ("atlas",), "choice", "auto", "value", ("auto", "en", "zh", "both"),
        doc="the probe set (auto: the UI's language, English where Chinese would be [UNK])"),
    Key("at_texts", ("atlas",), "text", "", doc="the user's own texts, one a line"),
    Key("at_part", ("atlas",), "choice", "encoder", "value", ("encoder", "decoder", "cross"),
        doc="an encoder-decoder's attention to show"),
    Key("at_layer", ("atlas",), "int", 0, "value", lo=0, doc="the head shown: its layer"),
    Key("at_head", ("atlas",), "int", 0, "value", lo=0, doc="the head shown: its head"),
    Key("at_qk", ("atlas",), "bool", False, doc="the head's Q/K map shown"),
    Key("at_qk_colour", ("atlas",), "choice", "position", "value", ("position", "kind"),
        doc="the Q/K map's colours: by position or by kind of token"),
    # the explorer's views (Playground and Pretrained model)
    Key("view", EXPLORER, "choice", _view_default, "value", VIEWS, always=True,
        doc="the view (default: heads on the Playground, overview on the model page)"),
    Key("layer", EXPLORER, "int", 0, "value", lo=0, always=True,
        doc="the layer of the views that pick one (kept through the views that do not)"),
    Key("head", EXPLORER, "int", 0, "value", lo=0, always=True,
        doc="the head of the views that pick one (Lines draws it; kept through the others)"),
    Key("query", EXPLORER, "int", 0, "value", lo=0, always=True,
        doc="a query position (One query, Rollout; Link opens on a pronoun and its antecedent)"),
    Key("link_key", EXPLORER, "int", None, "value", lo=0, always=True,
        doc="Link two tokens' key position (default: the key the strongest head links to)"),
    Key("why_key", ("pretrained",), "int", -1, "value", lo=-1,
        doc="Why here's key position (-1, the default: the key the head weighs most)"),
    Key("mark", EXPLORER, "text", None, "read",
        doc="q,k[,atlas]: the cell Head detail outlines and where it came from"),
    Key("focus", EXPLORER, "int", None, "value", lo=0, doc="a query whose row every head shows"),
    Key("wscale", EXPLORER, "choice", default_scale, "value", SCALES,
        doc="the weights' colour scale (default: fixed, or log past 64 tokens)"),
    Key("mosaic_shared", EXPLORER, "bool", False, doc="the overview: one colour scale for all"),
    Key("shared", EXPLORER, "bool", False, doc="Head detail: one colour scale for the layer"),
    Key("lines_heads", EXPLORER, "list", None, doc="the lines view's heads (default: the head)"),
    Key("lines_w", EXPLORER, "float", default_threshold, lo=0.0, hi=0.5,
        doc="the lines view's threshold: lines below it are not drawn"),
    Key("lines_focus", EXPLORER, "text", "", "value", doc="q<i> or k<j>: only that token's lines"),
    Key("lines_rows", EXPLORER, "bool", lambda cjk: cjk,
        doc="tokens in two rows (default: on for Chinese, Japanese or Korean text)"),
    Key("lines_pair", EXPLORER, "choice", "all", "value", ("all", "ab", "ba", "aa", "bb")),
    Key("ro_res", EXPLORER, "bool", True, doc="rollout with the residual connection"),
    Key("ro_scale", EXPLORER, "choice", default_scale, "value", SCALES),
    # what a head writes: weights or moved, words or pieces
    Key("field", EXPLORER, "choice", "weights", "value", ("weights", "moved"),
        doc="the maps: softmax weights, or moved (each weight × ||W_O v|| of its key)"),
    Key("unit", ("pretrained",), "choice", "pieces", "value", ("pieces", "word", "char"),
        doc="the views' tokens: the model's pieces, words, or whole characters"),
    Key("dla_token", ("pretrained",), "text", "", "value",
        doc="the logits view's token (default: the model's top next token)"),
    Key("cmp", ("pretrained",), "text", "",
        doc="the compare view's second text (the patch view's corrupted text)"),
    Key("fl_tau", ("pretrained",), "float", 0.04, lo=0.01, hi=0.5,
        doc="the flow view's threshold: parts of a node at or below it are dropped"),
    Key("fl_edge", ("pretrained",), "int", 0, "value", lo=0,
        doc="the flow view's picked head edge, by rank (0: the strongest)"),
    Key("pt_answer", ("pretrained",), "text", "", "value",
        doc="the patch view's answer token (default: the clean run's top next token)"),
    Key("pt_foil", ("pretrained",), "text", "", "value",
        doc="the patch view's foil token (default: the corrupted run's top next token)"),
    Key("pt_cell", ("pretrained",), "text", "", "value",
        doc="the patch view's residual cell \"layer,position\" whose causal cone is shaded"),
    Key("pt_exact_resid", ("pretrained",), "bool", False,
        doc="the patch view's residual map: the exact sweep, not its AtP estimate"),
    # classroom pages
    Key("st_own", ("step_by_step",), "bool", False, doc="the sidebar's sentence, not 我爱水课"),
    Key("st_dk", ("step_by_step",), "choice", 4, options=(2, 4, 8, 16)),
    Key("st_scale", ("step_by_step",), "bool", True),
    Key("st_causal", ("step_by_step",), "bool", False),
    Key("st_temp", ("step_by_step",), "float", 1.0, lo=0.05, hi=20.0),
    Key("st_query", ("step_by_step",), "int", lambda n: min(1, n - 1), "value", lo=0,
        doc="the query followed, by position (default 1: note 000 follows 爱)"),
    Key("step", ("step_by_step",), "int", 0, "value", lo=0, hi=3, doc="which of the four steps"),
    Key("ws_dk", ("why_scale",), "choice", 64, options=(1, 4, 16, 64, 256, 1024)),
    Key("mk_fill", ("masks",), "choice", "1e-10", "value", ("-1e9", "1e-10")),
    Key("mh_d", ("multihead",), "choice", 512, "value", (64, 128, 256, 512, 1024)),
    Key("mh_h", ("multihead",), "int", 8, "value", lo=1, hi=32, doc="a divisor of mh_d"),
    Key("mh_kv", ("multihead",), "int", lambda heads: heads, "value", lo=1, hi=32),
    Key("mh_layers", ("multihead",), "int", 6, lo=1, hi=12),
    Key("mh_ff", ("multihead",), "choice", 2048, "value", (256, 512, 1024, 2048, 4096, 8192)),
    Key("mh_vocab", ("multihead",), "int", 37_000, lo=1000, hi=300_000),
    Key("mh_seq", ("multihead",), "int", 4096, lo=1, hi=1_000_000),
    Key("mh_batch", ("multihead",), "int", 1, lo=1, hi=4096),
    Key("mh_bytes", ("multihead",), "choice", 2, options=(4, 2, 1, 0.5)),
    Key("sh_d", ("sharing",), "choice", 512, "value", (64, 128, 256, 512, 1024)),
    Key("sh_h", ("sharing",), "choice", 8, "value", (1, 2, 4, 8, 16)),
    Key("sh_kv", ("sharing",), "int", lambda heads: 4 if heads >= 4 else 1, "value", lo=1, hi=16),
    Key("sh_pick", ("sharing",), "choice", "", "value", ("", *_SHARING_PICKS),
        doc="a bundled decoder whose K/V grouping to show (empty: none; `sh_model` goes first)"),
    Key("sh_model", ("sharing",), "text", "",
        doc="a real model whose K/V grouping to show: folder, .gguf file or Hub id"),
    Key("po_a", ("positions",), "text", "狗咬人"),
    Key("po_b", ("positions",), "text", "人咬狗"),
    Key("po_delta", ("positions",), "int", 2, lo=-4, hi=4),
    Key("po_alpha", ("positions",), "choice", 2.0,
        options=(0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)),
    # the Generate page: attention while generating
    Key("g_pick", ("generate",), "choice", _first_decoder, "value", _DECODER_PICKS,
        doc="a bundled decoder (default: SmolLM2 in English, Gemma 3 in Chinese, where "
        "installed; else attnviz-char-zh-en); a name in `g_model` goes first"),
    Key("g_model", ("generate",), "text", "",
        doc="a decoder's folder, .gguf file or Hub id; empty: the model of `g_pick`"),
    Key("g_prompt", ("generate",), "text", lambda lang: translate("gen.default_prompt", lang),
        doc="the prompt (default: one in the UI's language)"),
    Key("g_n", ("generate",), "int", 16, lo=1, hi=64, doc="tokens to generate"),
    Key("g_greedy", ("generate",), "bool", True, doc="most likely token; off: sampled"),
    Key("g_stemp", ("generate",), "float", 1.0, lo=0.05, hi=5.0, doc="sampling temperature"),
    Key("g_topk", ("generate",), "int", 0, lo=0, hi=1000, doc="sample from the top k (0: all)"),
    Key("g_seed", ("generate",), "int", 0, lo=0, hi=2**31 - 1, doc="the sampler's seed"),
    Key("g_scale", ("generate",), "bool", True, doc="what if: divide by √d_head"),
    Key("g_temp", ("generate",), "float", 1.0, lo=0.05, hi=20.0, doc="what if: temperature"),
    Key("g_ablate", ("generate",), "list", [], doc="what if: silenced heads, L<layer>H<head>"),
    Key("g_step", ("generate",), "int", 0, "value", lo=0, doc="the step shown"),
    # the training lab
    Key("lab_seed", ("lab",), "int", 0, lo=0, hi=9999),
    Key("lab_steps", ("lab",), "int", 400, lo=50, hi=2000, doc="induction run: training steps"),
    Key("lab_lr", ("lab",), "choice", 0.001, options=(0.0003, 0.001, 0.003)),
    Key("lab_heads", ("lab",), "choice", 4, options=(1, 2, 4, 8)),
    Key("sc_dk", ("lab",), "choice", 256, options=(16, 64, 256)),
    Key("sc_steps", ("lab",), "int", 100, lo=20, hi=1000, doc="÷√d_k runs: training steps"),
)  # fmt: skip
KEYS: dict[str, Key] = {key.name: key for key in TABLE}
if len(KEYS) != len(TABLE):
    raise RuntimeError("a URL key is listed twice")
ALIASES = {old: key.name for key in TABLE for old in key.aliases}  # older key name -> its key
# Older page paths a link may carry -> the page's name now (the Pretrained page was "bert").
PAGE_ALIASES = {"bert": "pretrained"}
