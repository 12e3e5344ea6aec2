"""A corpus of hostile inputs for tests/test_hostile.py: texts of every script and size, control
characters, markup of every kind Streamlit and Plotly render, model names and paths, configs,
what-if knobs and URL values. Each markup payload carries the word "pwn", so what reaches the page
raw can be told from the app's own markup."""

from __future__ import annotations

import math

SCRIPTS = [
    "Hello world, this is fine.",
    "我爱水课",
    "مرحبا بالعالم",  # Arabic, right to left
    "שלום עולם",  # Hebrew
    "नमस्ते दुनिया",  # Devanagari with combining vowel signs
    "สวัสดีชาวโลก",  # Thai, no spaces
    "안녕하세요 세계",
    "こんにちは世界、カタカナ",
    "Привет, мир",
    "Γειά σου κόσμε",
    "👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 family",  # ZWJ sequences and skin tones
    "Z̷̢̛̛a̶̡̛l̴̢̛g̵̨̛o̸̧̕ text",  # stacked combining marks
    "𝕳𝖊𝖑𝖑𝖔 ∑∫√∞ ≠ ≤",  # mathematical alphanumerics
    "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
    "𠀀𠀁𪚥 astral ideographs",
]
CONTROL = [
    "a\x00b nul inside",
    "\x1b[31mred\x1b[0m terminal escapes",
    "line1\r\nline2\n\n\nline5",
    "tab\tseparated\tcells",
    "zero\u200bwidth\u200cjoiner\u200d",
    "\u202eevil right-to-left override\u202c",
    "\ufeffbyte order mark",
    "line\u2028separator\u2029paragraph",
    "\x7f\x08\x07 delete backspace bell",
]
SURROGATES = ["lone \ud800 high", "\udc00", "pair \ud83d\ude00 written as halves"]
SIZES = [
    "a",
    ".",
    "x" * 20_000,  # one 20k-character word
    "word " * 5000,  # 5000 words
    "我" * 5000,  # 5000 ideographs, no spaces
    "!?" * 3000,  # 6000 punctuation tokens
    "word " * 25_000,  # 125k characters: over the text budget
]
MARKUP = [
    "**pwn** _pwn_ ~~pwn~~",
    ":red[pwn] :material/pwn: :smile: :rainbow[pwn]",
    "<b>pwn</b><i>pwn</i><s>pwn</s>",
    "<script>alert('pwn')</script>",
    "<img src=x onerror=alert('pwn')>",
    "[pwn](javascript:alert(1))",
    "$pwn^2$ and $$\\int pwn$$",
    "# pwn\n## pwn heading",
    "```\npwn fenced\n```",
    "| pwn | b |\n|---|---|\n| 1 | 2 |",
    "<a href='javascript:alert(1)'>pwn</a>",
    "%{customdata}<br>pwn %{z}",
    "&lt;b&gt;pwn&lt;/b&gt; &amp;",
    "{placeholder} {n} %s %d {0}",
    "![pwn](http://127.0.0.1:1/x.png)",
]
EMPTY = ["", " ", "\n\t  \n"]
NOT_TEXT = [None, 123, 1.5, b"bytes", ["a list"], {"a": 1}, math.nan]

TEXTS = SCRIPTS + CONTROL + SURROGATES + SIZES + MARKUP + EMPTY
# Strings whose presence, verbatim and outside a code span, in a Markdown body or a figure string
# means user markup reached the page unescaped.
MARKDOWN_MARKERS = [
    "**pwn**",
    "_pwn_",
    "~~pwn~~",
    ":red[pwn]",
    ":material/pwn:",
    ":rainbow[pwn]",
    "[pwn](",
    "$pwn",
    "# pwn",
    "| pwn |",
    "![pwn]",
    ":red[evil]",
    "**bold**",
    "[x](javascript",
]
HTML_MARKERS = ["<b>pwn", "<i>pwn", "<s>pwn", "<script", "<img", "<a href", "<br>pwn"]

MODEL_NAMES = [
    "",
    " ",
    "../../../../etc",
    "/tmp",
    "~",
    "~root",
    "a" * 500,
    "a\x00b",
    "http://127.0.0.1:1/model",
    "gpt2",
    ":red[pwn] **pwn**",
    "<script>pwn</script>",
    "C:\\Windows\\System32",
    "/dev/zero",
    "/proc/self",
    "org/name/extra",
    "lone\ud800",
    ".",
    "$pwn$",
    "[pwn](javascript:alert(1))",
]
NOT_NAMES = [123, b"x", ["gpt2"]]

CONFIGS = [
    {"d_model": 0},
    {"d_model": -1},
    {"d_model": 1.5},
    {"d_model": True},
    {"d_model": "64"},
    {"d_model": 10**9},
    {"d_model": None},
    {"n_heads": 0},
    {"n_heads": 257, "d_head": 1},
    {"n_heads": 3},
    {"n_heads": True},
    {"d_head": 0},
    {"d_head": 4097},
    {"d_head": 2.5},
    {"n_kv_heads": 3},
    {"n_kv_heads": 0},
    {"n_layers": 25},
    {"n_layers": 0},
    {"temperature": 0},
    {"temperature": -1},
    {"temperature": math.nan},
    {"temperature": math.inf},
    {"temperature": 1e-40},
    {"temperature": 5e-324},
    {"temperature": True},
    {"temperature": "1"},
    {"temperature": 1e300},
    {"positional": "rope"},
    {"positional": None},
    {"use_scale": "yes"},
    {"use_scale": None},
    {"causal": 1},
    {"ffn": "true"},
    {"ffn": True, "d_ff": 10**6},
    {"seed": 1.5},
    {"seed": "x"},
    {"max_tokens": 0},
    {"max_tokens": 513},
    {"max_tokens": True},
    {"d_model": 1024, "n_heads": 256, "d_head": 4096},
    {"d_model": 1024, "d_head": 1024, "n_heads": 32, "n_layers": 6, "ffn": True},
]

KNOBS = [
    {"temperature": 0},
    {"temperature": -1},
    {"temperature": math.nan},
    {"temperature": math.inf},
    {"temperature": -math.inf},
    {"temperature": 1e-40},
    {"temperature": 5e-324},
    {"temperature": True},
    {"temperature": "1"},
    {"temperature": None},
    {"temperature": 1e300},
    {"use_scale": "no"},
    {"use_scale": None},
    {"use_scale": 1},
    {"ablate": [(0.5, 1.7)]},
    {"ablate": "L0H0"},
    {"ablate": [(99, 0)]},
    {"ablate": [(0,)]},
    {"ablate": [None]},
    {"ablate": [(-1, 0)]},
    {"ablate": 5},
    {"mask_tokens": [0.5]},
    {"mask_tokens": [-1]},
    {"mask_tokens": ["a"]},
    {"mask_tokens": [10**20]},
    {"mask_tokens": "0"},
    {"mask_tokens": 3},
    {"max_length": 4.7},
    {"max_length": 3},
    {"max_length": 10**9},
    {"max_length": True},
    {"max_length": "5"},
    {"max_length": -1},
    {"text_pair": 123},
    {"text_pair": ["a"]},
    {"text_pair": b"x"},
    {"text_pair": "lone \ud800"},
]

# (page, query string values) for a fresh session that lands on that page from a link.
URLS = [
    ("playground", {"d_model": "abc"}),
    ("playground", {"heads": "-1"}),
    ("playground", {"heads": "99999"}),
    ("playground", {"temp": "nan"}),
    ("playground", {"temp": "inf"}),
    ("playground", {"temp": "1e-300"}),
    ("playground", {"temp": "-5"}),
    ("playground", {"layers": "100"}),
    ("playground", {"dk_auto": "false", "d_head": "0"}),
    ("playground", {"dk_auto": "maybe"}),
    ("playground", {"view": "<script>pwn</script>"}),
    ("playground", {"view": "query", "query": "99999"}),
    ("playground", {"lang": "xx"}),
    ("playground", {"pos": "rope"}),
    ("playground", {"kv": "7"}),
    ("playground", {"text": "<b>pwn</b> **pwn**", "pair": ":red[pwn]"}),
    (
        "playground",
        {
            "d_model": "1024",
            "dk_auto": "false",
            "d_head": "1024",
            "heads": "32",
            "kv": "32",
            "layers": "6",
            "ffn": "true",
        },
    ),  # fmt: skip
    ("pretrained", {"wi_temp": "nan"}),
    ("pretrained", {"wi_temp": "1e-40"}),
    ("pretrained", {"wi_silence": "L99H99"}),
    ("pretrained", {"wi_hide": "999"}),
    ("pretrained", {"model": "../etc"}),
    ("pretrained", {"device": "meta"}),
    ("pretrained", {"d_layer": "99", "wi_temp": "2"}),
    ("step_by_step", {"st_dk": "3", "st_own": "true", "text": "**pwn** [pwn](x)"}),
    ("step_by_step", {"st_query": "99", "step": "99"}),
    ("why_scale", {"ws_dk": "7"}),
    ("sharing", {"sh_d": "9999", "sh_h": "0"}),
    ("positions", {"po_a": "<b>pwn</b> **pwn**", "po_b": ":red[pwn]"}),
    ("positions", {"po_alpha": "nan", "po_delta": "99"}),
    ("multihead", {"mh_d": "0", "mh_layers": "999"}),
]


def count() -> int:
    return (
        len(TEXTS)
        + len(NOT_TEXT)
        + len(MODEL_NAMES)
        + len(NOT_NAMES)
        + len(CONFIGS)
        + len(KNOBS)
        + len(URLS)
    )
