"""The language files: the same keys and the same {placeholders} in English and Chinese."""

from __future__ import annotations

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
