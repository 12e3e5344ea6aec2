"""Two claims about training and circuits: the lab's phase change (attnviz.claims.phase) and
the heads needed to carry 80 % of a task's effect (attnviz.claims.heads), on series and models
whose answer is known by construction, their numbers against independent recomputations (numpy's
slopes, the lab's own LabResult.crossed, Hugging Face eager attention with W_O's input zeroed by
a hook)."""

from __future__ import annotations

from urllib.parse import parse_qs

import numpy as np
import pytest
import torch

from attnviz.claims import heads, knockout, phase
from attnviz.claims.setting import Setting
from attnviz.training.lab import train
from tests import reproduce_models as planted
from tests.test_reproduce import _o_proj_silenced, check_record


def test_the_steps_of_a_synthetic_phase_change() -> None:
    steps = list(range(0, 110, 10))
    gap = [0.0, -0.01, -0.02, -0.05, -0.2, -0.6, -1.9, -2.5, -2.7, -2.75, -2.8]  # 50 -> 60
    score = [0.05, 0.05, 0.06, 0.1, 0.2, 0.4, 0.7, 0.9, 0.95, 0.95, 0.96]  # passes 0.5 at 60
    assert phase.first_crossing(steps, score, 0.5) == 60
    at, slope = phase.bump(steps, gap)
    assert at == 55 and slope == pytest.approx(-0.13)
    got = phase.judge_seed({"step": steps, "gap": gap, "induction": score}, window=10)
    assert got["within"] and got["apart"] == 5
    # within 10 of 55: the points at 50 and 60, -0.6 -> -1.9 of the whole fall 0 -> -2.8
    assert got["fall_in_window"] == pytest.approx(1.3 / 2.8)
    late = [0.05] * 9 + [0.6, 0.7]  # passes at 90: 35 steps after the bump
    got = phase.judge_seed({"step": steps, "gap": gap, "induction": late}, window=10)
    assert not got["within"] and got["apart"] == 35
    never = phase.judge_seed({"step": steps, "gap": gap, "induction": [0.1] * 11}, window=10)
    assert never["induction_step"] is None and not never["within"]
    assert phase.bump([0], [1.0]) == (None, 0.0)


def test_a_real_lab_run_and_its_record() -> None:
    s = Setting(lab_steps=200, lab_seeds=1)
    record = phase.phase_change(None, phase.LAB, s)
    check_record(record)
    result = train(phase.config(s, 0))  # the lab's own run, again: deterministic
    assert record.numbers["induction_step"] == result.crossed()  # the lab's own reading
    f = record.figure
    assert f["step"] == [p.step for p in result.points]
    gap = np.array([p.loss - p.loss_first for p in result.points])
    slopes = np.diff(gap) / np.diff(f["step"])  # the oracle: numpy's slopes
    i = int(np.argmin(slopes))
    assert record.numbers["bump_step"] == (f["step"][i] + f["step"][i + 1]) / 2
    apart = abs(record.numbers["induction_step"] - record.numbers["bump_step"])
    assert record.verdict == ("pass" if apart <= s.phase_window else "fail")
    keys = parse_qs(record.link["query"])
    assert record.link["page"] == "lab" and keys["lab_steps"] == ["200"]


def _table(effects: dict[frozenset, float]):
    """A benefit function from the share each set of heads carries (unlisted sets: the sum of
    their members' single shares, capped at 1); the full benefit is 2 nats."""

    def benefit(silenced) -> float:
        key = frozenset(silenced)
        share = effects.get(key, min(1.0, sum(effects.get(frozenset([h]), 0) for h in key)))
        return 2.0 * (1.0 - share)

    return benefit


def test_one_planted_head_needs_one_and_the_joint_effect_is_measured() -> None:
    every = [(0, h) for h in range(6)]
    one = _table({frozenset([(0, 3)]): 0.95})
    got = heads.needed(one, every, most=6)
    assert got["k"] == 1 and got["ranked"][0] == (0, 3) and got["full"] == 2.0
    a, b, c = (0, 0), (0, 1), (0, 2)
    overlap = _table({frozenset([a]): 0.6, frozenset([b]): 0.3, frozenset([c]): 0.15,
                      frozenset([a, b]): 0.7, frozenset([a, b, c]): 0.85})  # fmt: skip
    got = heads.needed(overlap, every, most=6)
    assert got["ranked"][:3] == [a, b, c] and got["k"] == 3  # the sum would say 2 (0.9)
    assert got["joint"] == pytest.approx([0.6, 0.7, 0.85])
    assert heads.needed(overlap, every, most=2)["k"] is None  # not within 2
    assert heads.needed(lambda s: 0.0, every, most=6)["k"] is None  # no benefit to carry


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    return planted.twice(tmp_path_factory.mktemp("carrier"), sink=False, carrier=True)


def test_the_planted_carrier_is_the_one_head_needed(carried) -> None:
    """The carrier raises the logits of letters and the space: a "first copy" of digits and a
    "second copy" of letters differ by a benefit that the carrier alone carries."""
    model, eager = carried
    copies = knockout.Copies(model, [("0123456789", "0123456789 abcdefghij klmnopq")])
    got = heads.measure(model, copies, Setting(heads_most=4))
    assert got["k"] == 1 and got["ranked"][0] == planted.CARRIER
    assert got["joint"][0] == pytest.approx(1.0, abs=0.02) and got["full"] > 1
    ids = copies.ids[0]

    def eager_benefit(silenced) -> float:  # the oracle: HF eager with W_O's input zeroed
        hooks = _o_proj_silenced(eager, silenced)
        try:
            with torch.no_grad():
                logits = eager(torch.tensor([ids])).logits[0]  # [n, vocab]
        finally:
            for hook in hooks:
                hook.remove()
        loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]),
                                                 reduction="none")  # fmt: skip
        first = loss[[t - 1 for t in copies.first[0]]].mean()
        second = loss[[t - 1 for t in copies.second[0]]].mean()
        return float(first - second)

    assert got["full"] == pytest.approx(eager_benefit(()), abs=1e-4)
    assert got["joint"][0] == pytest.approx(
        1 - eager_benefit([planted.CARRIER]) / eager_benefit(()), abs=1e-4
    )


def test_the_heads_needed_record(carried) -> None:
    model, _ = carried
    s = Setting(twice_texts=1, twice_words=8, heads_most=3)
    record = heads.heads_needed(model, "planted", s)
    check_record(record)
    assert record.verdict == "not comparable" and "no MHA decoder" in record.reason
    assert (record.numbers["attention"], record.numbers["query_heads"]) == ("GQA", 4)
    assert record.numbers["kv_heads"] == 2 and "GQA (4 query heads on 2 K/V heads)" in record.reason
    assert record.numbers["heads"] == planted.N_LAYERS * planted.N_HEADS


def test_a_later_run_is_merged_into_a_report(tmp_path) -> None:
    from attnviz.claims import report
    from attnviz.claims.record import Record
    from attnviz.claims.run import merge

    def rec(claim: str, model: str, value: float) -> Record:
        return Record(claim, "s", "src", model, {"x": value}, "pass", "why",
                      f"attnviz reproduce --only {claim} --models {model} --out o")  # fmt: skip

    base, later = tmp_path / "base", tmp_path / "later"
    report.write([rec("knockout", "a", 1.0), rec("sink", "a", 2.0)], base, Setting(), 10.0)
    report.write([rec("sink", "a", 3.0), rec("phase_change", "lab", 4.0)], later, Setting(), 5.0)
    merged = merge(base, later)
    facts, records = report.read(base / "report.json")
    assert [(r.claim, r.numbers["x"]) for r in records] == [
        ("sink", 3.0), ("knockout", 1.0), ("phase_change", 4.0)]  # fmt: skip
    assert facts["seconds"] == 10.0 and merged["merged"][0]["claims"] == ["sink", "phase_change"]
    assert "Merged in: sink, phase_change" in (base / "report.md").read_text(encoding="utf-8")
