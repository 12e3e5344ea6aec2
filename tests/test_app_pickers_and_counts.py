"""Pickers and counts on real pages in AppTest: the view picker after a run without the explorer,
the Multi-head calculators without a sentence, FLOPs with thousands separators, the step page's
query picker with a repeated token. The browser side of the picker and of the status line is in
tests/e2e/test_links_browser.py; the K/V heads a link keeps, in test_url_roundtrip.py."""

from __future__ import annotations

from attnviz.i18n import translate
from tests.apphelpers import app

PRETRAINED = "app_pages/pretrained.py"
MULTIHEAD = "app_pages/multihead.py"


def test_view_picker_is_sent_again_after_a_failed_model_load() -> None:
    # The picker came back without a selection (the server did not send its value), so
    # the browser's next rerun sent "no view" and the page fell back to the overview.
    at = app(PRETRAINED)
    at.segmented_control(key="view").set_value("detail").run()
    at.text_input(key="model").set_value("no-such-org/no-such-model-xyz").run()
    assert at.error and not at.get("button_group")  # no explorer while the model is missing
    at.text_input(key="model").set_value("").run()
    picker = at.segmented_control(key="view")
    assert picker.value == "detail" and picker.proto.set_value  # the browser is told "detail"


def test_view_picker_is_sent_again_after_an_empty_sentence() -> None:
    at = app(PRETRAINED)
    at.segmented_control(key="view").set_value("query").run()
    at.text_area(key="text").set_value("").run()
    at.text_area(key="text").set_value("The cat sat on the mat").run()
    picker = at.segmented_control(key="view")
    assert picker.value == "query" and picker.proto.set_value


def test_multihead_calculators_and_table_3_do_not_need_a_sentence() -> None:
    # An empty sentence hid the calculators and Table 3, which do not use it.
    at = app(MULTIHEAD, query={"text": ""})
    assert not at.exception
    assert any(translate("err.empty") in i.value for i in at.info)
    subheaders = [s.value for s in at.subheader]
    for key in ("mh.params", "mh.kv", "mh.table3"):
        assert translate(key) in subheaders, (key, subheaders)
    assert len(at.dataframe) == 4  # parameters, the Transformer's parts, KV cache, Table 3
    assert len(at.dataframe[-1].value) == 15  # every row of Table 3


def test_flops_have_thousands_separators() -> None:
    # FLOPs were bare integers while every other count had separators.
    at = app(MULTIHEAD, query={"mh_d": "1024"})
    flops = next(d.value for d in at.dataframe if "h = 1" in d.value.columns)
    cells = [str(c) for c in flops["h = 1"]]
    big = [c for c in cells if int(c.replace(",", "")) >= 1000]
    assert big and all("," in c for c in big), cells
    total = int(cells[-1].replace(",", ""))
    assert total == sum(int(c.replace(",", "")) for c in cells[:-1])


def test_step_page_query_picker_tells_repeated_tokens_apart() -> None:
    # The query radio was in the URL by its label: the second "the" reopened as the first.
    from tests.urlprop import url_of

    page = "app_pages/step_by_step.py"
    at = app(page, query={"st_own": "true", "text": "the cat saw the dog"})
    radio = at.radio(key="st_query")
    assert len(set(radio.options)) == len(radio.options) == 5
    radio.set_value(3).run()
    assert at.radio(key="st_query").value == 3
    fresh = app(page, query=url_of(at))
    assert fresh.radio(key="st_query").value == 3
    assert fresh.radio(key="st_query").options[3] != fresh.radio(key="st_query").options[0]
