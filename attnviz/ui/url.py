"""Every key a link may carry, in one table: which page reads it, its type, default and range.

A page never writes a URL key's name, default or range anywhere else: widgets take them from here
(`bound`, `default`), raw reads go through `read`, and tests/test_url_table.py holds the code to
this table (every key the code uses is listed, every listed key is used, and a link with a
non-default value opens the page with that value).

How a key gets into the URL:
- "widget": Streamlit writes it (bind="query-params"); it leaves out a value equal to the default.
- "value": attnviz writes the option's value (`seed` / `sync`), never a translated label, so a
  link reads the same in both languages; the default is left out too, unless the key is `always`.
- "read": read from a link, written by a page when it matters (e.g. mark=q,k).

Keys written even at their default (`always`): lang, view, layer, head, query and link_key, the
view itself. Their defaults are not fixed: the language follows the browser's, the view differs
by page, the query and key by model, text and view (Link opens on a pronoun, a decoder on its
last token), and a view without a head picker (Lines) still draws with the head. A link that
left them out would open another view wherever a default differs, and an entry of the browser's
history would not be a state that can be drawn again (attnviz.ui.history). The rest (settings
with a fixed default) stay short: left out at their default.

A key whose default depends on the view (`seed(..., follow=True)`: query, link_key) shows that
default until the user picks a value or a link gives one; from then on the value is kept.

A default given as a function depends on the page or on other controls (`default("kv",
heads=8)`); `Key.doc` says on what.
"""

from __future__ import annotations

import contextlib
import math
import urllib.parse
from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attnviz.ui.url_table import (  # noqa: F401  (the table, read as url.TABLE, url.KEYS...)
    ALIASES,
    ALL,
    BIND,
    EXPLORER,
    KEYS,
    PAGE_ALIASES,
    TABLE,
    VIEWS,
    Key,
)  # fmt: skip


def migrate() -> None:
    """Read the older names in a link as today's keys (?b_ablate=L3H1 is ?wi_silence=L3H1): the
    values move to the new name, which a link that has both keeps. Called before any page runs."""
    for old, new in ALIASES.items():
        if old not in st.query_params:
            continue
        found = st.query_params.get_all(old)
        del st.query_params[old]
        if new in st.query_params:
            continue
        target = key(new)
        value = found if target.kind == "list" else found[-1]
        st.query_params[new] = value
        if target.how == "widget" and new not in st.session_state:
            # a bound widget read the link before this run could rename the key: start it here
            with contextlib.suppress(TypeError, ValueError):  # not a value: as without it
                st.session_state[new] = (
                    list(found) if target.kind == "list" else _parse(target, found[-1])
                )


def redirect(page: str) -> None:
    """An older page path: open `page` with the same link (its keys read as migrate reads them).
    The sidebar's keys stay where they are: their widgets, drawn before the page, are bound to
    the URL already (Streamlit refuses to set them, and keeps them through a page change)."""
    migrate()
    sidebar = {k.name for k in TABLE if k.pages == ALL and k.how == "widget"}
    kept = {name: st.query_params.get_all(name) for name in st.query_params if name not in sidebar}
    st.switch_page(f"app_pages/{page}.py", query_params=kept)


def key(name: str) -> Key:
    try:
        return KEYS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a URL key: add it to attnviz/ui/url.py") from None


def default(name: str, **context: Any) -> Any:
    """The key's default; a default that depends on something takes it by keyword."""
    value = key(name).default
    return value(**context) if isinstance(value, Callable) else value


def bound(name: str) -> dict[str, str]:
    """The keyword arguments that bind a widget to its URL key (how="widget")."""
    found = key(name)
    if found.how != "widget":
        raise ValueError(f"{name!r} is written by attnviz ({found.how}), not bound by Streamlit")
    return {"key": name, "bind": BIND}


def _parse(found: Key, raw: str) -> Any:
    """One URL value in the key's type, or ValueError when it is not one."""
    if found.kind == "bool":
        if raw.strip().lower() not in ("true", "false"):
            raise ValueError(raw)
        return raw.strip().lower() == "true"
    if found.kind in ("int", "float"):
        value = int(raw) if found.kind == "int" else float(raw)
        if not math.isfinite(value):  # nan passes both range checks below; inf is no setting
            raise ValueError(raw)
        if (found.lo is not None and value < found.lo) or (
            found.hi is not None and value > found.hi
        ):
            raise ValueError(raw)
        return value
    if found.kind == "choice" and found.options:
        by_text = {str(option): option for option in found.options}
        if raw not in by_text:
            raise ValueError(raw)
        return by_text[raw]
    return raw


def read(name: str, **context: Any) -> Any:
    """The value a link gives the key, in its type and range; the default when the link has none
    or a value that is not one (a typo in a link opens the page as without it)."""
    found = key(name)
    raw = st.query_params.get(name)
    if raw is None:
        return default(name, **context)
    try:
        return _parse(found, raw)
    except (TypeError, ValueError):
        return default(name, **context)


def values(name: str) -> list[str]:
    """Every value a link gives a list key (?g_ablate=L0H1&g_ablate=L2H3), as typed."""
    key(name)
    return st.query_params.get_all(name)


def present(name: str) -> bool:
    """Whether the link carries the key at all."""
    key(name)
    return name in st.query_params


def write(name: str, value: Any) -> None:
    """Put a value a page decided (how="read") in the URL."""
    key(name)
    if st.query_params.get(name) != str(value):
        st.query_params[name] = str(value)


def drop(name: str) -> None:
    """Take a key out of the URL once a page has acted on it (how="read")."""
    key(name)
    if name in st.query_params:
        del st.query_params[name]


_KEPT = "_url_kept_"
_CHOSEN = "_url_chosen_"  # the user (or a link) picked the value of a key that follows a default


def navigating() -> bool:
    """Whether this run answers the browser's Back or Next (attnviz.ui.history): the URL of the
    entry it returns to decides every key, not what the session had."""
    ctx = get_script_run_ctx()
    return bool(getattr(ctx, "is_history_navigation", False))


def from_history() -> None:
    """On Back or Next, before anything is drawn: forget the session's values of the keys attnviz
    writes ("value" and "read"), so that `seed` and `read` take them from the entry's URL, or
    the default where it has none. Streamlit does the same for the bound widgets."""
    if not navigating():
        return
    for found in TABLE:
        if found.how != "widget":
            for name in (found.name, _KEPT + found.name, _CHOSEN + found.name):
                st.session_state.pop(name, None)


def first_sight(name: str) -> bool:
    """Whether this session has not drawn the key's widget yet: a value in the URL now is the
    link's, not one the session picked."""
    return _KEPT + name not in st.session_state


def chose(name: str) -> None:
    """A widget's on_change: the user picked this value; it no longer follows the default."""
    st.session_state[_CHOSEN + name] = True


def seed(name: str, options: list, default_value: Any, follow: bool = False) -> None:
    """Start a widget from the URL (?key=value) when it (re)appears, by option value, not label.

    For widgets whose labels are translated: streamlit's bind="query-params" would put the
    translated label in the URL, so a link would change with the language. Without a value in the
    URL, the last value this session had (kept by `sync`) comes back: the browser drops the query
    string when you go to another page, and coming back must not reset the page.

    `follow`: the default depends on the view (Link opens on another query than One query). Until
    the user picks a value (`chose` as the widget's on_change) or a link gives one on the
    session's first sight of the key, the widget shows `default_value`, view after view.
    """
    key(name)
    raw = st.query_params.get(name)
    by_text = {str(o): o for o in options}
    first_sight = _KEPT + name not in st.session_state
    if follow and first_sight and raw in by_text:
        chose(name)  # a link's value (or Back's) is a choice, whatever the view's default
    if follow and not st.session_state.get(_CHOSEN + name):
        st.session_state[name] = default_value
        return
    if name in st.session_state:
        return
    kept = st.session_state.get(_KEPT + name)
    fallback = kept if kept in options else default_value
    st.session_state[name] = by_text.get(raw, fallback)


def sync(name: str, default_value: Any) -> None:
    """Write the widget's value to the URL, or drop it when it is the default (a key that is
    `always` written keeps it); keep it for `seed` in case the widget goes away (another page, a
    run without it)."""
    found = key(name)
    value = st.session_state.get(name)
    st.session_state[_KEPT + name] = value
    if value is None or (value == default_value and not found.always):
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get(name) != str(value):
        st.query_params[name] = str(value)


def seed_list(name: str, options: list, default: tuple | list = ()) -> None:
    """Start a multiselect from the URL by its options' values (?wi_hide=3&wi_hide=7: positions),
    never their labels ("3: the" changes with the sentence and the language). A value that is no
    option is dropped; so is a kept one the options lost (a shorter sentence). An older link's
    label ("3: the") reads as its leading value. `default`: the values of a first visit (a link
    without the key); `?name=` alone (sync_list's empty marker) is none picked."""
    key(name)
    by_text = {str(option): option for option in options}
    if name in st.session_state:
        kept = st.session_state[name] or []
        st.session_state[name] = [v for v in kept if v in options]
        return
    raw = st.query_params.get_all(name)
    if raw:
        found = [by_text.get(r.split(":")[0].strip()) for r in raw]
    elif _KEPT + name in st.session_state:
        found = st.session_state[_KEPT + name] or []
    else:
        found = list(default)
    picked: list = []
    for value in found:
        if value in options and value not in picked:
            picked.append(value)
    st.session_state[name] = picked


def sync_list(name: str, empty_marker: bool = False) -> None:
    """Write a multiselect's values to the URL in the order picked (none: the key is dropped, or
    with `empty_marker` written as ?name= so that a link keeps "none" for a key whose default
    is not empty)."""
    key(name)
    values = list(st.session_state.get(name) or [])
    st.session_state[_KEPT + name] = values
    if not values:
        if empty_marker:
            if st.query_params.get_all(name) != [""]:
                st.query_params[name] = ""
        elif name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get_all(name) != [str(v) for v in values]:
        st.query_params[name] = [str(v) for v in values]


def query_string() -> str:
    """The URL's query as this run leaves it, encoded as the browser's address bar holds it."""
    pairs = [(name, value) for name in st.query_params for value in st.query_params.get_all(name)]
    return urllib.parse.urlencode(pairs)
