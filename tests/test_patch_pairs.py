"""Activation patching over prompt pairs on Ray (attnviz.patch_pairs, `attnviz patch`), on a
local Ray of one worker started once for the module, with the bundled char model:

1. the summary of three pairs equals the mean / std / min / max of attnviz.patch run on each pair
   in this process, within 1e-6; the fourth pair (other token counts) is skipped with its reason;
2. a rerun after one part is deleted patches only that part's pair again (the worker's counter,
   the other parts' mtimes), and gives the same summary;
3. the same folder is refused for another model or another `over`;
4. the command line runs once end to end on one pair (its own Ray), and refuses bad arguments.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import attnviz
from attnviz.engine.hooked import load_model
from attnviz.serve import corpus_ray, patch_pairs

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray instance and one worker: 20-60 s with their start
MODEL = "attnviz-char-zh-en"
TOL = 1e-6
WAIT_S = 120
PAIRS = [
    {"clean": "I like red", "corrupt": "I like tea"},
    {"clean": "she went home", "corrupt": "he went home!"},
    {"clean": "一只猫在", "corrupt": "一只狗在"},
    {"clean": "abc", "corrupt": "abcd"},  # 4 tokens and 5: skipped
]


@pytest.fixture(scope="module")
def local_ray():
    corpus_ray.start_local(num_cpus=1)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PAIRS), "utf-8")
    return path


@pytest.fixture(scope="module")
def whole_run(local_ray, pairs_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    return patch_pairs.patch_pairs(MODEL, pairs_file, out, workers=1), out


def test_summary_equals_patch_on_each_pair(whole_run):
    frame, out = whole_run
    model = load_model(MODEL, device="cpu")
    runs = [attnviz.patch(model, p["clean"], p["corrupt"]) for p in PAIRS[:3]]
    effects = np.stack([r.effect.to_numpy() for r in runs])  # [pairs, components]
    assert frame[["layer", "head"]].equals(runs[0][["layer", "head"]])
    assert np.abs(frame["mean"].to_numpy() - effects.mean(0)).max() <= TOL
    assert np.abs(frame["std"].to_numpy() - effects.std(0, ddof=1)).max() <= TOL
    assert np.abs(frame["min"].to_numpy() - effects.min(0)).max() <= TOL
    assert np.abs(frame["max"].to_numpy() - effects.max(0)).max() <= TOL
    assert (frame["count"] == 3).all()
    [(pair, source, reason)] = frame.attrs["skipped"]
    assert (pair, source) == (3, "pairs.jsonl:4") and "same number of tokens" in reason
    saved = pd.read_parquet(out / "effects.parquet")
    assert np.allclose(saved[["mean", "std"]], frame[["mean", "std"]], atol=0)
    assert len(pd.read_csv(out / "effects.csv")) == len(frame)


def test_a_rerun_patches_only_the_missing_part(whole_run, pairs_file):
    frame, out = whole_run
    parts = sorted((out / "parts").glob("part-*.parquet"))
    assert len(parts) == 4  # one pair a part (corpus_ray.batch_size)
    parts[1].unlink()
    kept = {p: p.stat().st_mtime_ns for p in parts if p != parts[1]}
    name = corpus_ray.worker_name(corpus_ray.plan(MODEL, None, 0), 0, patch_pairs.KIND)
    worker = ray.get_actor(name)
    before = ray.get(worker.patched.remote(), timeout=WAIT_S)
    seen = []
    again = patch_pairs.patch_pairs(MODEL, pairs_file, out, workers=1, progress=seen.append)
    assert ray.get(worker.patched.remote(), timeout=WAIT_S) == before + 1
    assert [s.parts_done for s in seen] == [4] and parts[1].exists()
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    pd.testing.assert_frame_equal(again, frame)


def test_another_model_or_over_is_refused(whole_run, pairs_file, tmp_path_factory):
    from tests.writes_models import build

    _, out = whole_run
    other = build("gpt2", tmp_path_factory.mktemp("gpt2")).model
    with pytest.raises(ValueError, match="another run .*model"):
        patch_pairs.patch_pairs(other, pairs_file, out)
    with pytest.raises(ValueError, match="another run .*settings='patch over=heads'"):
        patch_pairs.patch_pairs(MODEL, pairs_file, out, over="residual")


def test_bad_pairs_are_refused_before_any_work(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"clean": "a b"}\n', "utf-8")
    with pytest.raises(ValueError, match='bad.jsonl:1: "corrupt" must be a non-empty text'):
        patch_pairs.read_pairs(bad)
    with pytest.raises(ValueError, match="--over 'positions'"):
        patch_pairs.patch_pairs(MODEL, PAIRS, tmp_path, over="positions")


def test_the_command_line_end_to_end(pairs_file, tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_text(pairs_file.read_text("utf-8").splitlines()[0] + "\n", "utf-8")
    cmd = [sys.executable, "-m", "attnviz.cli", "patch", "--pairs", str(one), "--model", MODEL]
    done = subprocess.run([*cmd, "--out", str(tmp_path / "run"), "--workers", "1"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1/1 pairs" in done.stderr and "effects.csv" in done.stderr
    assert len(pd.read_csv(tmp_path / "run" / "effects.csv")) == 32  # 4 layers x 8 heads
    bad = subprocess.run([*cmd, "--out", str(tmp_path / "run"), "--over", "positions"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "invalid choice: 'positions'" in bad.stderr


def test_bad_arguments_exit_2_with_one_line(pairs_file, tmp_path, capsys):
    from attnviz import cli

    out = str(tmp_path / "out")
    common = ["patch", "--model", MODEL, "--out", out]
    assert cli.main([*common, "--pairs", str(tmp_path / "nope.jsonl")]) == 2
    assert cli.main([*common, "--pairs", str(pairs_file), "--workers", "0"]) == 2
    assert cli.main([*common, "--pairs", str(pairs_file), "--address", "nowhere"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["attnviz patch"] * 3
    assert "no such pairs file" in lines[0] and "--workers 0" in lines[1]
    assert "not a Ray address" in lines[2]
