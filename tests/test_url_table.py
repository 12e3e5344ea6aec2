"""attnviz/ui/url.py is the one table of URL keys: the code uses no key it does not list, lists
no key it does not use, reads the URL nowhere else, and each page opens with the table's
defaults and with the value a link gives."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnviz.ui import url
from tests.apphelpers import APP_DIR, app

UI = APP_DIR / "ui"
# Functions that take a URL key as a literal argument, and where it is.
KEY_ARGS = {
    "bound": 0, "default": 0, "read": 0, "present": 0, "write": 0, "seed": 0, "sync": 0, "key": 0,
    "url_select": 3, "choice_slider": 2, "kv_slider": 2, "_steps_slider": 1, "_pick_index": 0,
    "seed_list": 0, "sync_list": 0, "_switch": 0, "_pick_token": 0,
    "pick_model": (0, 1),  # the picker's key and the typed name's (ui/models.py)
}  # fmt: skip
PICKERS = {"pick_scale": "wscale", "pick_window": None, "pick_focus": "focus"}


def _sources() -> list[Path]:
    return [p for p in APP_DIR.rglob("*.py") if p not in (UI / "url.py", UI / "url_table.py")]


def used_keys() -> dict[str, set[str]]:
    """Every URL key the code names, with the files that name it."""
    found: dict[str, set[str]] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            fname = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            kw = {k.arg: k.value for k in node.keywords}
            names = []
            at = KEY_ARGS.get(fname, ())
            for i in at if isinstance(at, tuple) else (at,):
                arg = node.args[i] if i < len(node.args) else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.append(arg.value)
            if fname in PICKERS:
                given = kw.get("key")
                names.append(given.value if isinstance(given, ast.Constant) else PICKERS[fname])
            for name in names:
                if name is not None:
                    found.setdefault(name, set()).add(path.name)
    return found


def test_every_key_the_code_uses_is_in_the_table_and_every_listed_key_is_used() -> None:
    used = used_keys()
    unlisted = {k: sorted(v) for k, v in used.items() if k not in url.KEYS and k != "window"}
    assert not unlisted, f"keys missing from attnviz/ui/url.py: {unlisted}"
    unused = sorted(set(url.KEYS) - set(used) - {"projector"})  # bound as projector.KEY
    assert not unused, f"listed but not used: {unused}"


def test_the_url_is_read_and_bound_only_through_the_table() -> None:
    raw = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "bind":
                raw.append(f"{path.name}: bind=")
            is_qp = isinstance(node, ast.Attribute) and node.attr == "query_params"
            if is_qp and path.name != "language.py":
                raw.append(f"{path.name}:{node.lineno}: st.query_params")
    # language.py reads ?lang= as typed (zh-CN is no option of the picker; attnviz.i18n maps it)
    assert not raw, raw


PAGE_OF = {
    "playground": "app_pages/playground.py",
    "step_by_step": "app_pages/step_by_step.py",
    "why_scale": "app_pages/why_scale.py",
    "masks": "app_pages/masks.py",
    "multihead": "app_pages/multihead.py",
    "sharing": "app_pages/sharing.py",
    "positions": "app_pages/positions.py",
    "generate": "app_pages/generate.py",
    "lab": "app_pages/lab.py",
}
# A page's keys checked on its small model: Generate would open on SmolLM2 where installed (the
# picker's own key then tries SmolLM2 once: ui/url.py orders its options for that).
BASE = {"generate": {"g_pick": "attnviz-char-zh-en"}}


def _other_value(key: url.Key, current):
    """A valid value of the key other than `current`, as a URL string, or None."""
    if key.kind == "bool":
        return "false" if current else "true"
    if key.options:
        others = [o for o in key.options if o != current]
        return str(others[len(others) // 2]) if others else None
    if key.kind == "int" and isinstance(current, int):
        # half or double: head counts must divide d_model, and halving keeps a divisor
        value = current // 2 if current > 1 else current + 1
        return str(value) if key.lo is None or value >= key.lo else None
    if key.kind == "float" and isinstance(current, float):
        return str(current * 2 if key.hi is None or current * 2 <= key.hi else current / 2)
    if key.kind == "text" and isinstance(current, str):
        return "狗咬人" if current != "狗咬人" else "人咬狗"
    return None


@pytest.mark.parametrize("page", sorted(PAGE_OF))
def test_each_page_opens_with_the_table_defaults_and_with_a_link_value(page: str) -> None:
    at = app(PAGE_OF[page], query=BASE.get(page))
    assert not at.exception
    state = at.session_state
    keys = [k for k in url.TABLE if page in k.pages and k.name in state]
    assert keys or page == "masks", f"no URL key of {page} found on the page"
    checked = 0
    for key in keys:
        current = state[key.name]
        if not callable(key.default) and key.default is not None:
            assert current == key.default, f"{page}: {key.name} opens at {current!r}"
        value = _other_value(key, current)
        if value is None:
            continue
        linked = app(PAGE_OF[page], query={**BASE.get(page, {}), key.name: value})
        assert not linked.exception, (key.name, value)
        got = linked.session_state[key.name]
        want = url._parse(key, value)
        assert got == want or str(got) == value, f"{page}: ?{key.name}={value} opened at {got!r}"
        checked += 1
    assert checked >= min(2, len(keys)), f"{page}: only {checked} keys checked"


def test_older_key_names_in_a_link_are_read_as_todays() -> None:
    """The Pretrained page's what-if keys were b_*: a link with them opens what it always did,
    and the address then carries today's names (wi_*, part)."""
    at = app("app_pages/pretrained.py", query={"b_scale": "false", "b_ablate": ["L3H1", "L5H11"]})
    assert not at.exception
    assert at.toggle(key="wi_scale").value is False
    assert at.multiselect(key="wi_silence").value == ["L3H1", "L5H11"]
    assert "b_scale" not in at.query_params and "b_ablate" not in at.query_params
    # a link with both names keeps the new one
    at = app("app_pages/pretrained.py", query={"b_temp": "3.0", "wi_temp": "2.0"})
    assert at.number_input(key="wi_temp").value == 2.0
    assert url.ALIASES == {
        "b_scale": "wi_scale", "b_temp": "wi_temp", "b_ablate": "wi_silence",
        "b_mask": "wi_hide", "b_part": "part",
    }  # fmt: skip


FLOATS = [k for k in url.TABLE if k.kind == "float"]
NOT_FINITE = ("nan", "NaN", "inf", "-inf", "Infinity")


@pytest.mark.parametrize("key", FLOATS, ids=[k.name for k in FLOATS])
def test_a_float_key_refuses_values_that_are_not_finite(key: url.Key) -> None:
    """float("nan") passes `nan < lo` and `nan > hi` (both false): the parser refuses it and
    inf, so `read` and `migrate` give the default, as for any value out of range."""
    for raw in NOT_FINITE:
        with pytest.raises(ValueError):
            url._parse(key, raw)
    assert url._parse(key, str(key.lo if key.lo is not None else 1.0)) is not None


def _page_path(key: url.Key) -> str:
    page = "pretrained" if key.pages in (url.EXPLORER,) else key.pages[0]
    return PAGE_OF.get(page, f"app_pages/{page}.py")


@pytest.mark.parametrize(
    ("name", "raw"),
    [(k.name, raw) for k in FLOATS for raw in ("nan", "-inf")] + [("b_temp", "nan")],
)
def test_a_link_with_nan_or_inf_opens_the_page_at_the_default(name: str, raw: str) -> None:
    """?b_temp=nan once reached the engine: "temperature=nan must be a finite number"."""
    key = url.key(url.ALIASES.get(name, name))
    page = _page_path(key)
    query = {**BASE.get(Path(page).stem, {}), name: raw}
    if key.pages == url.EXPLORER:
        query["view"] = "lines"  # the view that draws lines_w's slider
    at = app(page, query=query)
    assert not at.exception, [e.value for e in at.exception]
    if key.name in at.session_state:
        got = at.session_state[key.name]
        assert got == got and abs(got) != float("inf"), f"?{name}={raw} opened at {got!r}"
        if not callable(key.default):
            assert got == key.default
