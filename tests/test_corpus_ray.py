"""The head atlas over a corpus on Ray (attnviz.atlas_corpus), on a local Ray of 2 CPU workers
started once for the module, with the bundled char model:

1. the merged atlas of 40 texts (and one over the token limit, skipped and listed) equals
   head_roles of the same texts in this process within 1e-6;
2. a run interrupted after two parts (Ctrl-C) keeps them, and the same call again finishes with
   the same atlas.parquet;
3. a worker killed mid-run (ray.kill, restarted by Ray) changes nothing in atlas.parquet;
4. a worker that never answers stops the run after its wait (no hang), keeping the folder.
Every wait on Ray here has a timeout (WAIT_S).
The workers are named actors, reused by the three runs (each start costs seconds).
"""

from __future__ import annotations

import re
import time

import pyarrow.parquet as pq
import pytest
import torch

from attnviz import atlas_corpus
from attnviz.engine.hooked import load_model
from attnviz.measures import roles
from attnviz.serve import corpus, corpus_ray

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray instance and two workers: 20-90 s with their start
MODEL = "attnviz-char-zh-en"
TOL = 1e-6
WAIT_S = 120  # seconds any ray.get here waits (a worker's restart included)


def corpus_texts() -> list[str]:
    """40 texts of both languages under the char model's 256 tokens, then the English passage
    (865 tokens), which must be skipped."""
    en, zh = roles.probe_texts("en"), roles.probe_texts("zh")
    pieces = re.split(r"(?<=[.;。；，,])\s*", en["passage"][0] + zh["passage"][0])
    texts = en["natural"] + zh["natural"] + en["repeated"] + zh["repeated"]
    texts += [p for p in pieces if len(p.strip()) > 8][: 40 - len(texts)]
    assert len(texts) == 40
    return [*texts, en["passage"][0]]


@pytest.fixture(scope="module")
def local_ray():
    corpus_ray.start_local(num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "texts.txt"
    path.write_text("\n".join(corpus_texts()) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def whole_run(local_ray, texts_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    return atlas_corpus(MODEL, texts_file, out, workers=2, progress=False), out


def same_parquet(a, b) -> None:
    ta, tb = pq.read_table(a / "atlas.parquet"), pq.read_table(b / "atlas.parquet")
    assert ta.equals(tb) and ta.schema.metadata == tb.schema.metadata


def test_merged_atlas_equals_one_process(whole_run):
    frame, out = whole_run
    texts = corpus_texts()[:40]
    assert torch.get_num_threads() == 1  # as each worker (tests/conftest.py)
    want = roles.head_roles(load_model(MODEL, device="cpu"), texts)
    numbers = [*roles.SCORES, *roles.EXTRA]
    assert (frame[numbers] - want[numbers]).abs().max().max() <= TOL
    why = list(roles.QK_COLUMNS)  # a corpus atlas keeps no model to split logits with: NaN
    rest = [c for c in want.columns if c not in numbers and c not in why]
    assert frame[rest].equals(want[rest])
    assert frame[why].isna().all().all() and want[why].notna().all().all()
    saved = corpus.open_atlas(out / "atlas.parquet")
    assert saved.meta["skipped"] == [[40, "texts.txt:41", "865 tokens > --max-tokens 256"]]
    assert len(saved.meta["texts"]) == 40 and saved.meta["model"] == MODEL
    assert roles.merge_sums(saved.sums).equals(frame)
    assert sorted(set(saved.sums.text)) == list(range(40))


def test_a_loaded_model_is_taken_by_its_name(whole_run, texts_file):
    # Regression: a notebook's loaded model was refused ("load_model takes a Hub id, a folder,
    # None ..."). Its name is the run's: the finished folder is merged again, no worker needed.
    frame, out = whole_run
    again = atlas_corpus(load_model(MODEL, device="cpu"), texts_file, out, progress=False)
    assert again.equals(frame)


def test_an_interrupted_run_goes_on_to_the_same_parquet(whole_run, texts_file, tmp_path):
    parts = []

    def stop_after_two(progress: corpus_ray.Progress) -> None:
        parts.append(progress.parts_done)
        if len(parts) == 2:
            raise KeyboardInterrupt  # Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        atlas_corpus(MODEL, texts_file, tmp_path, workers=2, progress=stop_after_two)
    written = sorted((tmp_path / "parts").glob("part-*.parquet"))
    n_parts = corpus.Manifest(MODEL, 256, corpus_ray.batch_size(41), 41, "").n_parts
    assert 2 <= len(written) < n_parts and not (tmp_path / "atlas.parquet").exists()
    seen = []
    atlas_corpus(MODEL, texts_file, tmp_path, workers=2, progress=seen.append)
    assert seen[0].parts_done > 2 and seen[-1].done == 41  # went on; did not start over
    same_parquet(tmp_path, whole_run[1])


def test_a_killed_worker_changes_nothing(whole_run, texts_file, tmp_path):
    name = corpus_ray.worker_name(corpus_ray.plan(MODEL, None, 0), 0)
    first = ray.get_actor(name)
    before = ray.get(first.pid.remote(), timeout=WAIT_S)
    killed = []

    def kill_once(progress: corpus_ray.Progress) -> None:
        if not killed:  # the worker still holds its next batch
            ray.kill(ray.get_actor(name), no_restart=False)
            killed.append(progress.parts_done)

    atlas_corpus(MODEL, texts_file, tmp_path, workers=2, progress=kill_once)
    assert (
        killed and ray.get(ray.get_actor(name).pid.remote(), timeout=WAIT_S) != before
    )  # restarted by Ray
    same_parquet(tmp_path, whole_run[1])


def test_a_stuck_worker_stops_the_run(local_ray, texts_file, tmp_path):
    @ray.remote(num_cpus=0)
    class Stuck:
        """A worker that never sends its batch back (a driver hang, a lost node)."""

        def ready(self) -> bool:
            return True

        def score(self, items, max_tokens):
            time.sleep(3600)

    stuck = Stuck.remote()
    assert ray.get(stuck.ready.remote(), timeout=WAIT_S)
    texts = corpus.read_corpus(texts_file)
    manifest = corpus.Manifest(MODEL, 256, corpus_ray.batch_size(41), 41, texts.sha256)
    store = corpus.Store.open(tmp_path, manifest)
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"no part came back in 2 s \(parts \[0, 1\]"):
            corpus_ray.run(texts, store, [stuck], None, stall_s=2.0)
    finally:
        ray.kill(stuck)
    assert time.monotonic() - start < 10 and not store.done()
