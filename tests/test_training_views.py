"""The Generate and Training lab figures (attnviz.views.training): built from plain numbers, with
every name escaped, the threshold and the marked step where they were asked for."""

from __future__ import annotations

from attnviz.views import training


def test_curves_escape_names_and_draw_threshold_and_mark() -> None:
    fig = training.curves(
        {"<b>head</b>": ([0, 10, 20], [0.1, 0.6, 0.9]), "b": ([0, 10], [1.0, 0.5])},
        title="t", x_title="step", y_title="score",
        guides=training.Guides(0.5, "<i>0.5</i>", {"appears at 10": 10}),
    )  # fmt: skip
    names = [trace.name for trace in fig.data]
    assert names == ["&lt;b&gt;head&lt;/b&gt;", "b"]
    assert list(fig.data[0].x) == [0.0, 10.0, 20.0] and list(fig.data[1].y) == [1.0, 0.5]
    shapes = fig.layout.shapes
    assert {s.type for s in shapes} == {"line"} and len(shapes) == 2
    texts = [a.text for a in fig.layout.annotations]
    assert "&lt;i&gt;0.5&lt;/i&gt;" in texts and "appears at 10" in texts


def test_cache_growth_marks_the_step_shown() -> None:
    fig = training.cache_growth([8, 9, 10], [8192, 9216, 10240], 1, title="c", x_title="n",
                                y_title="KiB")  # fmt: skip
    assert list(fig.data[0].y) == [8.0, 9.0, 10.0]
    assert list(fig.data[1].x) == [9] and list(fig.data[1].y) == [9.0]
