"""The training lab (attnviz.training.lab, attnviz.serve.lab): an induction head forms within the
default budget at a fixed seed, ÷√d_k keeps the gradient through the softmax alive at d_k = 256,
bad settings get clear messages, and the server trains at most LAB_RUNS jobs at once."""

from __future__ import annotations

import math
import statistics
import time

import pytest
import torch

from attnviz.serve import lab as jobs
from attnviz.training.lab import (
    INDUCTION_THRESHOLD,
    LAB_SECONDS,
    AttentionOnly,
    LabConfig,
    induction_scores,
    most_steps,
    train,
)


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_an_induction_head_forms_within_the_default_budget() -> None:
    config = LabConfig()  # the page's default run, seed 0
    result = train(config)
    crossed = result.crossed()
    first, last = result.points[0], result.points[-1]
    print(
        f"induction: crossed {INDUCTION_THRESHOLD} at step {crossed} of {config.steps}; "
        f"score {max(first.induction):.3f} -> {max(last.induction):.3f}; repeated-half loss "
        f"{first.loss:.3f} -> {last.loss:.3f}; {result.seconds:.1f} s"
    )
    assert result.stopped == "done" and result.seconds <= LAB_SECONDS
    assert crossed is not None and 0 < crossed < config.steps
    assert max(first.induction) < 0.2  # at initialisation nothing looks at the next token
    assert max(last.induction) > 0.8
    # the repeat becomes predictable; the first half stays at chance, about ln(vocab)
    assert last.loss < 0.3
    assert last.loss_first == pytest.approx(math.log(config.vocab), rel=0.15)


@pytest.mark.slow  # two 60-step trainings at d_k = 256
def test_scaling_keeps_the_softmax_gradient_alive_at_large_d_k() -> None:
    runs = {
        scaled: train(LabConfig(d_k=256, use_scale=scaled, steps=60, eval_every=5))
        for scaled in (True, False)
    }
    grad = {s: statistics.mean(p.grad_logits for p in r.points) for s, r in runs.items()}
    first = {s: r.points[0] for s, r in runs.items()}
    print(
        f"d_k=256: mean ‖∂loss/∂logits‖ scaled {grad[True]:.5f}, unscaled {grad[False]:.5f} "
        f"(ratio {grad[False] / grad[True]:.2f}); mean max weight at step 0 scaled "
        f"{first[True].max_weight:.3f}, unscaled {first[False].max_weight:.3f}; entropy "
        f"{first[True].entropy:.3f} vs {first[False].entropy:.3f} nats"
    )
    assert grad[False] < 0.75 * grad[True]
    assert first[False].max_weight > 0.8 > 0.3 > first[True].max_weight
    assert first[False].entropy < 0.5 * first[True].entropy


def test_induction_score_reads_the_right_cells() -> None:
    half = 4
    weights = torch.zeros(1, 2, 2 * half, 2 * half)  # [b, head, q, k]
    for j in range(half - 1):
        weights[0, 1, half + j, j + 1] = 1.0  # head 1: a perfect induction head
        weights[0, 0, half + j, half + j] = 1.0  # head 0: looks at itself
    assert induction_scores(weights, half).tolist() == [0.0, 1.0]


def test_the_model_is_causal_and_its_rows_sum_to_one() -> None:
    config = LabConfig(steps=1)
    model = AttentionOnly(config)
    ids = torch.randint(0, config.vocab, (2, config.n_ctx))
    _, weights, _ = model(ids)
    for w in weights:
        assert torch.all(w.triu(1) == 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    # a later token cannot change an earlier prediction
    out, _, _ = model(ids)
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % config.vocab
    out2, _, _ = model(changed)
    torch.testing.assert_close(out[:, :-1], out2[:, :-1])


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(n_heads=3), "n_heads=3 does not divide d_model=64"),
        (dict(steps=10**6), "steps=1000000 must be between"),
        (dict(lr=float("nan")), "finite"),
        (dict(d_k=1024, batch=256, half=64), "this server allows"),
        (dict(seconds=3600), "seconds=3600 is out of range"),
    ],
)
def test_bad_settings_get_clear_messages(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        LabConfig(**settings)


def test_a_run_stops_when_asked_and_the_server_refuses_more_than_lab_runs() -> None:
    long = LabConfig(steps=2000)
    started = [jobs.start([long]) for _ in range(jobs.LAB_RUNS)]
    try:
        with pytest.raises(jobs.Busy, match="already"):
            jobs.start([long])
    finally:
        t0 = time.perf_counter()
        for job in started:
            job.stop()
        assert all(job.wait(10) for job in started)
        stopped_in = time.perf_counter() - t0
    assert stopped_in < 5
    assert all(job.results[0].stopped == "stopped" for job in started)
    assert all(job.progress() == 1.0 and job.error is None for job in started)
    # the slots are free again
    job = jobs.start([LabConfig(steps=3), LabConfig(steps=3, use_scale=False)])
    assert job.wait(30) and job.error is None
    assert [r.steps_done for r in job.results] == [3, 3]
    assert [len(r.points) for r in job.results] == [1, 1] or all(r.points for r in job.results)


def test_most_steps_is_the_budget_edge() -> None:
    # Regression: the ÷√d_k slider offered 1000 steps, refused at d_k 256 ("2.2 TFLOP ... allows
    # 2.0"). most_steps is the last step count LabConfig accepts for the same settings.
    for settings in (dict(d_k=256, eval_every=5), dict(d_k=64, eval_every=5), dict(n_heads=8)):
        most = most_steps(**settings)
        assert 1 <= most <= 5000
        LabConfig(**settings, steps=most)
        if most < 5000:
            with pytest.raises(ValueError, match="this server allows"):
                LabConfig(**settings, steps=most + 1)
    assert most_steps(d_k=256, eval_every=5) < 1000 <= most_steps(d_k=64, eval_every=5)
    assert most_steps(d_k=1024, batch=256, half=64) == 0  # over the memory budget at one step


def _page(query: dict):
    from tests.apphelpers import app

    return app("app_pages/lab.py", query=query)


def test_the_lab_sliders_offer_only_what_the_budget_allows() -> None:
    at = _page({"sc_dk": "256", "sc_steps": "1000"})  # a link asking for more than allowed
    assert not at.exception and not at.error
    steps = at.slider(key="sc_steps")
    assert steps.max == most_steps(d_k=256, eval_every=5) // 10 * 10 and steps.value == steps.max
    assert not at.button(key="lab_train_scaling").disabled
    at.select_slider(key="sc_dk").set_value(64).run()
    assert at.slider(key="sc_steps").max == 1000
    at.slider(key="sc_steps").set_value(1000).run()
    at.select_slider(key="sc_dk").set_value(256).run()  # back: the steps come down to fit
    assert not at.exception and not at.error
    assert at.slider(key="sc_steps").value == steps.max


def test_stop_ends_the_run_within_its_own_rerun() -> None:
    # Regression: Stop took 2.9 s to answer: its rerun drew the run still going, the section's
    # next poll (1 s) saw it end, and a third run brought Train back. Now the rerun of the click
    # waits for the run to end (it stops after its step) and draws it stopped, Train enabled.
    at = _page({"lab_steps": "2000"})
    at.button(key="lab_train_induction").click().run()
    assert at.button(key="lab_train_induction").disabled
    time.sleep(1.0)
    at.button(key="lab_stop_induction").click().run()
    assert not at.exception
    assert not at.button(key="lab_train_induction").disabled
    assert at.button(key="lab_stop_induction").disabled
    assert any(p.proto.text.startswith("Stopped:") for p in at.get("progress"))
