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
ASSETS = Path(__file__).resolve().parent / "assets" / "i18n"
# What people type for a language in a link (?lang=zh) or what a browser reports as its language
# (navigator.language: "zh-CN", "zh-Hant-TW", "en-GB"), beyond the labels the language picker
# writes itself ("English", "中文").
_ALIASES = {"cn": "zh", "chinese": "zh", "english": "en", "汉语": "zh", "英文": "en"}


def language_of(value: str | None) -> str | None:
    """The UI language ("en" / "zh") that a link's `lang` or a browser's locale asks for: a code
    ("zh", "EN"), a locale ("zh-CN", "zh_Hans", "en-US"), a label ("中文", "English") or a common
    name ("chinese"). None when it names neither language."""
    if not value:
        return None
    raw = value.strip()
    by_label = {label: code for code, label in LANGUAGES.items()}
    if raw in by_label:
        return by_label[raw]
    word = raw.lower().replace("_", "-")
    primary = word.split("-", 1)[0]
    if primary in LANGUAGES:
        return primary
    return _ALIASES.get(word) or _ALIASES.get(primary)


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


class Message(str):
    """A message an engine function reports (a loader's progress): the English text, as any caller
    of a `progress(str)` callback reads it, plus its key and fields, so a page can show it in its
    own language (`in_language`)."""

    key: str
    fields: dict[str, object]

    def __new__(cls, key: str, **fields: object) -> Message:
        try:
            text = translate(key, "en", **fields)
        except OSError:  # the engine never needs the UI's strings: without them, key and fields
            text = " ".join([key, *(f"{k}={v}" for k, v in fields.items())])
        made = super().__new__(cls, text)
        made.key, made.fields = key, fields
        return made

    def in_language(self, lang: str) -> str:
        return translate(self.key, lang, **self.fields)


def localized(message: str, lang: str) -> str:
    """`message` in `lang` when it is a Message; any other text as it is."""
    return message.in_language(lang) if isinstance(message, Message) else message
