"""The UI language: the picker's state, a link's ?lang=, the browser's locale; `t` translates."""

from __future__ import annotations

import streamlit as st

from attnviz.i18n import LANGUAGES, language_of, strings, translate
from attnviz.i18n import localized as in_language
from attnviz.ui import url


def lang() -> str:
    # The radio shows (and puts in the URL) "English" / "中文"; code uses "en" / "zh".
    label = st.session_state.get("lang", LANGUAGES["en"])
    return next((code for code, name in LANGUAGES.items() if name == label), "en")


def t(key: str, **fmt: object) -> str:
    return translate(key, lang(), **fmt)


def browser_locale() -> str | None:
    """The browser's language (navigator.language, e.g. "zh-CN"); None outside a browser."""
    try:
        return st.context.locale
    except Exception:  # noqa: BLE001  (no script run context: a bare import, a test harness)
        return None


_LANG_TO_URL = "_lang_to_url"  # the language was picked from an alias or the browser: URL it


def seed_language() -> None:
    """Before the language picker's first run: a link's ?lang=zh (or zh-CN, cn, chinese...) opens
    in Chinese, though the picker itself writes its label (?lang=中文), which nobody types. With no
    language in the link, a browser set to Chinese opens in Chinese. A value that names no language
    opens in English, the default. The language is written to the URL as the picker's label at
    once, English too (url.py: lang is `always` written; its default follows the browser, so a
    link without it opens in the reader's language): a link copied right away reopens in the
    language it was copied in. A link's alias (zh) is replaced before the picker first runs
    (`language_to_url` reruns): the picker would drop it, and the URL with it."""
    if "lang" in st.session_state:  # from the first run on, the picker decides
        return
    raw = st.query_params.get("lang")  # as typed: read() would drop zh-CN, which is no option
    url.key("lang")
    label = _label(raw if raw is not None else browser_locale())
    st.session_state["lang"] = label
    if raw != label:
        st.query_params["lang"] = label
        st.session_state[_LANG_TO_URL] = raw is not None


def from_history() -> None:
    """On Back or Next: the entry's language at once, before anything is translated. The picker
    would take it from the URL only when drawn, after the page's title and the default sentence
    (which follows the language) were made in the language the session had."""
    if not url.navigating():
        return
    st.session_state["lang"] = _label(st.query_params.get("lang"))


def _label(said: str | None) -> str:
    """The picker's label for what a link or a browser says (zh, zh-CN, 中文...); English else."""
    return LANGUAGES[language_of(said) or "en"]


def language_to_url() -> None:
    """Once the page is known (after st.navigation), before the picker's first run: rerun when
    `seed_language` wrote the language to the URL. The picker then starts from the URL's label;
    had it run now, it would have dropped the alias (zh is none of its options) and the URL with
    it, until the first change. A rerun of the app's top only, once a session."""
    if st.session_state.pop(_LANG_TO_URL, False):
        st.rerun()


def localized(table, cells: tuple[str, ...] = ()):
    """A DataFrame for display in the UI language: columns named by t("col.<name>") where the
    language file has that key, and the listed columns' text cells by t("cell.<value>").
    Missing values show as "—" in those columns. The engine's frames keep their English names
    (CSV exports and the JSON trace stay stable)."""
    known = strings(lang())
    table = table.copy()
    for col in cells:
        table[col] = [
            "—" if v is None or v != v else t(f"cell.{v}") if f"cell.{v}" in known else v
            for v in table[col]
        ]
    names = {c: t(f"col.{c}") for c in table.columns if f"col.{c}" in known}
    names |= {c: t("col.on", name=c[3:]) for c in table.columns if str(c).startswith("on ")}
    return table.rename(columns=names)


def said(err: BaseException) -> str:
    """An engine error's message in the page's language: one raised with an attnviz.i18n.Message
    (the budget's refusals) is translated; any other as it is. Not escaped."""
    return in_language(err.args[0], lang()) if err.args else str(err)


def input_problem(err: BaseException) -> str:
    """What to tell the user about a text the engine refused, escaped for Markdown: the page's
    own words for an empty one (attnviz.engine.errors.EmptyInput), else the engine's message."""
    from attnviz.engine.errors import EmptyInput
    from attnviz.ui import markup

    return t("err.empty") if isinstance(err, EmptyInput) else markup.escape(said(err))
