"""The language files: the same keys and the same {placeholders} in English and Chinese."""

from __future__ import annotations

import re
import string

from attnviz.i18n import LANGUAGES, examples, strings, translate


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_languages_have_the_same_keys():
    en, zh = strings("en"), strings("zh")
    assert set(en) == set(zh), set(en) ^ set(zh)
    assert len(examples("en")) == len(examples("zh"))


def test_placeholders_match():
    en, zh = strings("en"), strings("zh")
    bad = {k: (_fields(en[k]), _fields(zh[k])) for k in en if _fields(en[k]) != _fields(zh[k])}
    assert not bad, bad


# A Chinese character or full-width mark; what is not prose: {placeholders} (with formats such as
# {w:.3f}) and `code`.
_CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
_NOT_PROSE = re.compile(r"\{[^{}]*\}|`[^`]*`")


def half_width_beside_chinese(text: str) -> list[str]:
    """Each half-width : , ( ) ; whose nearest neighbour (past spaces and markdown's *) is Chinese;
    a function's brackets, ln(...), excepted."""
    text = _NOT_PROSE.sub(lambda m: "\ue000" * len(m.group()), text)
    found, opened = [], []  # opened: for each open bracket, whether it is a function's
    for i, mark in enumerate(text):
        if mark == "(":
            opened.append(i > 0 and text[i - 1].isascii() and text[i - 1].isalpha())
        if mark not in ":,();" or (opened and opened[-1] and mark in "()"):
            if mark == ")" and opened:
                opened.pop()
            continue
        if mark == ")" and opened:
            opened.pop()
        left = text[:i].rstrip(" *")[-1:]
        right = text[i + 1 :].lstrip(" *")[:1]
        if _CJK.match(left or " ") or _CJK.match(right or " "):
            found.append(f"{mark}@{i}")
    return found


def test_the_chinese_atlas_uses_full_width_punctuation():
    # Regression: the Atlas page wrote "第 0 层, 第 2 个头: 前一个词元" and "(重复)" in Chinese.
    example = "第 0 层, 第 2 个头: {role} (w = {w:.3f}) ln(x)"
    assert half_width_beside_chinese(example) == [",@5", ":@13"]
    assert half_width_beside_chinese("第 0 层，第 2 个头：{role}（w = {w:.3f}）ln(x)") == []
    zh = strings("zh")
    bad = {k: half_width_beside_chinese(v) for k, v in zh.items() if k.startswith("at.")}
    assert not {k: v for k, v in bad.items() if v}


def test_one_chinese_name_for_head_detail_and_lists_with_the_chinese_comma(monkeypatch):
    # Regression: "头部详情" beside "单头详情" for one view; "英文, 中文" in a model's facts.
    from attnviz.engine.bundled import bundled_models
    from attnviz.ui import models

    zh = strings("zh")
    assert not [k for k, v in zh.items() if "头部详情" in v]
    monkeypatch.setattr(models, "t", lambda key, **fmt: translate(key, "zh", **fmt))
    (char,) = [m for m in bundled_models() if m.name == "attnviz-char-zh-en"]
    assert "英文、中文" in models.facts(char) or "中文、英文" in models.facts(char)


def test_translate_formats_and_falls_back_to_the_key():
    assert translate("warn.truncated", "zh", n=9, limit=3) == "文本有 9 个词元，只显示前 3 个。"
    assert translate("no.such.key", "en") == "no.such.key"
    assert set(LANGUAGES) == {"en", "zh"}


def test_language_of_reads_codes_locales_labels_and_names():
    from attnviz.i18n import language_of

    for value in ("zh", "ZH", "zh-CN", "zh_Hans", "zh-Hant-TW", "cn", "Chinese", "中文", " 中文 "):
        assert language_of(value) == "zh", value
    for value in ("en", "EN-us", "en_GB", "english", "English"):
        assert language_of(value) == "en", value
    for value in (None, "", "xx", "fr-FR", "zhx", "<script>"):
        assert language_of(value) is None, value


def test_a_message_is_english_text_that_a_page_can_show_in_chinese():
    from attnviz.i18n import Message, localized

    m = Message("load.weights", name="bert-base")
    assert m == "Loading the weights of bert-base" and isinstance(m, str)
    assert localized(m, "zh") == "正在加载 bert-base 的权重"
    assert localized("plain text", "zh") == "plain text"


def test_the_loader_reports_its_steps_as_messages(tmp_path):
    from attnviz.engine.hooked import load_model
    from attnviz.i18n import Message

    said: list = []
    load_model(None, device="cpu", progress=said.append)
    assert [m.key for m in said] == ["load.finding", "load.tokenizer", "load.weights", "load.done"]
    assert all(isinstance(m, Message) for m in said) and said[-1].endswith("on cpu")
