"""attnviz.reproduce's claims on tiny models whose answer is known by construction (a planted
sink, a planted head the prediction relies on; tests/reproduce_models.py), their numbers against
Hugging Face eager attention, the records' schema, the report's files and the shipped report's
numbers against its own figures (every number on the page comes from a run)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs

import pytest
import torch
import torch.nn.functional as F

from attnviz.claims import knockout, kobayashi, phase, report, runs, sink, texts
from attnviz.claims.bos import one_bos
from attnviz.claims.record import VERDICTS, Record
from attnviz.claims.run import CLAIMS, reproduce
from attnviz.claims.setting import EPSILON, Setting
from attnviz.cli import main
from attnviz.engine.hooked import load_model
from attnviz.ui.url_table import KEYS
from tests import reproduce_models as planted

SMALL = Setting(sink_prompts=2, norm_prompts=1, special_texts=2, twice_texts=2, twice_words=8,
                knock_k=2, knock_random=3)  # fmt: skip
SHIPPED = (
    Path(__file__).resolve().parent.parent / "attnviz" / "assets" / "reproduce" / "report.json"
)


@pytest.fixture(scope="module")
def sunk(tmp_path_factory):
    return planted.twice(tmp_path_factory.mktemp("sink"))


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    return planted.twice(tmp_path_factory.mktemp("carrier"), sink=False, carrier=True)


def test_a_planted_sink_passes_and_its_alpha_is_hf_eagers(sunk) -> None:
    model, eager = sunk
    record = sink.sink_metric(model, "planted", SMALL)
    alpha = torch.tensor(record.figure["alpha"])  # [layer, head]
    assert record.verdict == "pass" and record.numbers["sink_metric"] > 0
    assert alpha[planted.SINK] > 0.99  # planted: ~all of its weight on token 0
    # the oracle: HF eager attention's weights on the same prompts
    traced = sink.prompts(model, SMALL, SMALL.sink_prompts)
    ids = torch.tensor([t.token_ids for t in traced])  # [prompt, 64]
    with torch.no_grad():
        att = torch.stack(eager(ids, output_attentions=True).attentions)  # [layer, b, h, q, k]
    expected = att[..., 1:, 0].mean(-1).mean(1)  # rows 1.. see token 0: [layer, head]
    torch.testing.assert_close(alpha, expected, atol=1e-5, rtol=0)
    share = float((expected > EPSILON).float().mean())
    assert record.numbers["sink_metric"] == pytest.approx(share)


def test_no_sink_without_the_planted_head(tmp_path) -> None:
    model = planted.build(tmp_path, sink=False)  # every query 0: uniform attention
    record = sink.sink_metric(model, "uniform", SMALL)
    assert record.numbers["sink_metric"] == 0 and record.verdict == "fail"
    alpha = torch.tensor(record.figure["alpha"])
    torch.testing.assert_close(alpha, torch.full_like(alpha, sink.uniform_alpha(64)))


def test_the_sink_tokens_norms_are_hf_eagers(sunk) -> None:
    model, eager = sunk
    record = sink.sink_norms(model, "planted", SMALL)
    ids = sink.prompts(model, SMALL, 1)[0].token_ids
    with torch.no_grad():
        states = eager(torch.tensor([ids]), output_hidden_states=True).hidden_states
    h = torch.stack([s[0].norm(dim=-1) for s in states[: model.n_layers]])  # [layer, n]
    torch.testing.assert_close(torch.tensor(record.figure["h_first"]), h[:, 0], atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(record.figure["h_others"]), h[:, 1:].mean(-1),
                               atol=1e-4, rtol=0)  # fmt: skip
    assert record.figure["v_first"] == [0.0] * model.n_layers  # planted: [BOS]'s value is 0
    assert record.verdict == "pass"  # [BOS]'s ‖h‖ is ~10x, its ‖v‖ 0


def _o_proj_silenced(eager, heads):
    """Hooks that zero the silenced heads' slice of W_O's input in the eager model (the oracle)."""
    hooks = []
    for layer, head in heads:
        o_proj = eager.model.layers[layer].self_attn.o_proj

        def zero(module, args, head=head):
            x = args[0].clone()
            x[..., head * planted.D_HEAD : (head + 1) * planted.D_HEAD] = 0
            return (x,)

        hooks.append(o_proj.register_forward_pre_hook(zero))
    return hooks


@pytest.mark.parametrize("silenced", [(), (planted.CARRIER,), ((0, 1), planted.CARRIER)])
def test_token_losses_are_hf_eagers_with_heads_silenced(carried, silenced) -> None:
    model, eager = carried
    batch = [runs.ids_of(model, "abc abd abc abd"), runs.ids_of(model, "hello")]
    got = runs.token_losses(model, batch, silenced)
    hooks = _o_proj_silenced(eager, silenced)
    try:
        for ids, losses in zip(batch, got, strict=True):
            with torch.no_grad():
                logits = eager(torch.tensor([ids])).logits[0]  # [n, vocab]
            want = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")
            torch.testing.assert_close(losses, want, atol=1e-4, rtol=0)
    finally:
        for hook in hooks:
            hook.remove()


def test_the_planted_heads_knockout_hurts_more_than_random_sets(carried) -> None:
    model, _ = carried
    copies = knockout.Copies(model, texts.said_twice(2, 8, 0))
    first, base = copies.losses(model)
    ranked = [planted.CARRIER, (0, 0)]
    got = knockout.curve(model, copies, ranked, SMALL)
    assert got["top"][0] > base + 1  # the head every letter's logit relies on
    assert all(r == pytest.approx(base, abs=1e-5) for r in got["random"][0])  # they write nothing
    assert got["top"][0] > max(got["random"][0])
    assert len(got["random"]) == SMALL.knock_k and len(got["random"][1]) == SMALL.knock_random
    for k, sets in enumerate(knockout.random_sets([(0, h) for h in range(8)], {(0, 0)}, 2, 5, 1)):
        assert len(set(sets)) == 2 and (0, 0) not in sets, k


def test_the_knockout_verdict() -> None:
    got = {"top": [2.0, 3.0], "random": [[1.0, 2.5], [1.1, 1.2]]}
    verdict, why, share, passed = knockout.judge(4.0, 1.0, got)  # benefit 3 nats
    assert verdict == "pass" and passed == [2] and share == pytest.approx([1 / 3, 2 / 3])
    assert "top 2" in why
    got["random"][1] = [3.5]  # a random set hurts more at k = 2
    assert knockout.judge(4.0, 1.0, got)[0] == "fail"
    assert knockout.judge(1.0, 1.0, got)[:2] == ("fail", "no induction benefit to take back "
                                                 "(0.00 nats)")  # fmt: skip


def test_the_bos_check_catches_a_doubled_bos(monkeypatch) -> None:
    from attnviz.engine.hooked import encoding

    char = load_model("attnviz-char-zh-en", device="cpu")  # adds [BOS]; no GGUF, no template
    record = one_bos(char, "attnviz-char-zh-en", SMALL)  # attnviz drops the template's own [BOS]
    assert record.numbers["plain_leading_bos"] == 1
    assert record.numbers["chat_leading_bos"] == 1 and record.verdict == "pass"
    monkeypatch.setattr(encoding, "one_bos", lambda model, text: text)  # without that fix
    record = one_bos(char, "attnviz-char-zh-en", SMALL)
    assert record.numbers["chat_leading_bos"] == 2  # the template's own [BOS] after the added one
    assert record.verdict == "fail" and "2 BOS" in record.reason


def test_kobayashi_on_minilm_and_not_on_a_decoder(carried) -> None:
    minilm = load_model(None, device="cpu")
    record = kobayashi.special_tokens(minilm, "minilm", SMALL)
    raw, moved = record.figure["weights"], record.figure["moved"]
    assert len(raw) == minilm.n_layers and record.numbers["texts"] == SMALL.special_texts
    assert record.numbers["weights_share_mean"] == pytest.approx(sum(raw) / len(raw))
    assert record.numbers["layers_shrunk"] == sum(m < r for m, r in zip(moved, raw, strict=True))
    assert kobayashi.special_tokens(carried[0], "x", SMALL).verdict == "not comparable"


def check_record(r: Record) -> None:
    """The schema every record keeps, and a command and link that parse."""
    assert r.claim in CLAIMS and r.verdict in VERDICTS and r.reason and r.statement
    assert r.source and r.model and isinstance(r.numbers, dict)
    assert r.command.split()[:4] == ["attnviz", "reproduce", "--only", r.claim]
    assert r.model in r.command
    if r.link:
        keys = parse_qs(r.link["query"])
        page = r.link["page"]
        wrong = [k for k in keys if k not in KEYS or not {page, "*"} & set(KEYS[k].pages)]
        assert not wrong, wrong


def test_a_run_writes_its_report_with_progress(tmp_path) -> None:
    seen = []
    records = reproduce(["sink", "sink_norms"], ["attnviz-char-zh-en"], tmp_path,
                        lambda f, m: seen.append(f), SMALL)  # fmt: skip
    assert [r.claim for r in records] == ["sink", "sink_norms"]
    assert seen == sorted(seen) and seen[-1] == 1.0
    facts, back = report.read(tmp_path / "report.json")
    assert [r.as_json() for r in back] == [r.as_json() for r in records]
    assert facts["setting"]["sink_prompts"] == SMALL.sink_prompts and facts["seconds"] > 0
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert all(f"| {r.claim} | attnviz-char-zh-en |" in text for r in records)
    for r in back:
        check_record(r)
    other = reproduce(["sink"], ["attnviz-char-zh-en"], None, None, Setting(sink_prompts=2,
                      norm_prompts=1, seed=5))  # fmt: skip
    assert other[0].numbers["mean_alpha"] != records[0].numbers["mean_alpha"]  # measured


def test_a_stop_and_bad_requests() -> None:
    assert reproduce(["sink"], ["attnviz-char-zh-en"], stop=lambda: True) == []
    with pytest.raises(ValueError, match="no claim named nope"):
        reproduce(["nope"])
    with pytest.raises(ValueError, match="not a shipped model"):
        reproduce(["sink"], ["gpt2"])
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", "--only", "nope", "--out", "x"])
    assert exit_.value.code == 2
    with pytest.raises(ValueError, match="not a readable report"):
        report.read("/nonexistent/report.json")


def test_the_shipped_reports_numbers_are_its_figures() -> None:
    """attnviz/assets/reproduce/report.json, as `attnviz reproduce` wrote it: each headline number
    is the one its own figure's data gives (nothing typed in by hand; JSON keeps 6 decimals), every
    record keeps the schema."""
    facts, records = report.read(SHIPPED)
    assert json.loads(SHIPPED.read_text())["format"] == report.FORMAT and facts["date"]
    assert {r.claim for r in records} == set(CLAIMS)
    for r in records:
        check_record(r)
        n, fig = r.numbers, r.figure
        if r.claim == "sink":
            alpha = torch.tensor(fig["alpha"])
            assert n["sink_metric"] == pytest.approx(
                float((alpha > EPSILON).float().mean()), abs=1e-5
            )
        elif r.claim == "kobayashi":
            assert n["moved_share_mean"] == pytest.approx(
                sum(fig["moved"]) / len(fig["moved"]), abs=1e-5
            )
        elif r.claim == "in_context":
            loss, w = fig["loss"], facts["setting"]["icl_window"]
            late = loss[fig["late"] - 1 - w : fig["late"] + w]
            assert n["loss_late"] == pytest.approx(sum(late) / len(late), abs=1e-5)
        elif r.claim == "knockout":
            share = (fig["top"][-1] - fig["base"]) / (fig["first"] - fig["base"])
            assert n["share_top6"] == pytest.approx(share, abs=1e-5)
            assert all(len(sets) == facts["setting"]["knock_random"] for sets in fig["random"])
        elif r.claim == "phase_change":
            assert n["induction_step"] == phase.first_crossing(fig["step"], fig["induction"], 0.5)
            assert n["bump_step"] == phase.bump(fig["step"], fig["gap"])[0]
        elif r.claim == "heads_needed" and n["heads_needed"] is not None:
            assert n["heads_needed"] == len(fig["joint"]) and n["carried"] >= 0.8
            assert n["carried"] == pytest.approx(fig["joint"][-1], abs=1e-5)
            assert n["share_of_heads"] == pytest.approx(n["heads_needed"] / n["heads"], abs=1e-5)
