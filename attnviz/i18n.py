"""Every UI string in English and Chinese, read from assets/i18n/<lang>.toml. No streamlit here.

Each language file has a [strings] table (key = text, with {placeholders} for str.format) and an
[examples] table (label = sentence; "|||" separates a second sentence). Both files have the same
keys; tests/test_i18n.py checks it.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

LANGUAGES = {"en": "English", "zh": "中文"}
ASSETS = Path(__file__).resolve().parent.parent / "assets" / "i18n"


@cache
def table(lang: str) -> dict[str, dict[str, str]]:
    """The parsed language file of `lang` ("en" or "zh")."""
    if lang not in LANGUAGES:
        raise ValueError(f"lang={lang!r} is not a UI language: use one of {sorted(LANGUAGES)}")
    with open(ASSETS / f"{lang}.toml", "rb") as f:
        return tomllib.load(f)


def strings(lang: str = "en") -> dict[str, str]:
    return table(lang)["strings"]


def examples(lang: str = "en") -> dict[str, str]:
    """Example label -> sentence, in the order of the language file."""
    return table(lang)["examples"]


def translate(key: str, lang: str = "en", **fmt: object) -> str:
    """The string for `key` in `lang`; a missing key shows itself so it is easy to spot."""
    text = strings("zh" if lang == "zh" else "en").get(key)
    if text is None:
        return key
    return text.format(**fmt) if fmt else text
