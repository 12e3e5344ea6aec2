"""A corpus atlas without Ray (attnviz.serve.corpus, the `attnviz atlas` command's checks): the
corpus file read and refused clearly, texts over the limit skipped and listed, lean traces, the
folder of parts, and a saved atlas opened within bounds. Ray's own run: tests/test_corpus_ray.py.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnviz import cli
from attnviz.engine import budget as budget_module
from attnviz.engine.hooked import load_model, trace_model
from attnviz.measures import roles
from attnviz.serve import corpus
from attnviz.serve.corpus_ray import STALL_ENV, check_address, plan

MODEL = "attnviz-char-zh-en"


@pytest.fixture(scope="module")
def char_model():
    return load_model(MODEL, device="cpu")


def test_corpus_files_are_read_or_refused_clearly(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("first text\n\n  second text  \n", encoding="utf-8")
    got = corpus.read_corpus(txt)
    assert got.texts == ("first text", "second text") and got.sources == ("a.txt:1", "a.txt:3")
    assert got.ignored == 1
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text('{"text": "one"}\n"two"\n', encoding="utf-8")
    assert corpus.read_corpus(jsonl).texts == ("one", "two")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "x.txt").write_text("doc x", encoding="utf-8")
    (folder / "y.txt").write_text("文档 y", encoding="utf-8")
    assert corpus.read_corpus(folder).texts == ("doc x", "文档 y")
    cases = {
        "empty.txt": (b"", "holds no texts"),
        "blank.txt": (b"\n  \n", "holds no texts"),
        "model.bin": (b"GGUF\x00\x01\x02", "binary, not text"),
        "latin.txt": ("caf\xe9".encode("latin-1"), "not UTF-8"),
        "bad.jsonl": (b'{"text": "ok"}\n{oops\n', "bad.jsonl:2 is not JSON"),
        "nofield.jsonl": (b'{"body": "x"}\n', '"text" string'),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=message):
            corpus.read_corpus(tmp_path / name)
    with pytest.raises(ValueError, match="no such corpus"):
        corpus.read_corpus(tmp_path / "missing.txt")
    (tmp_path / "none").mkdir()
    with pytest.raises(ValueError, match="no .txt files"):
        corpus.read_corpus(tmp_path / "none")


def test_the_command_refuses_bad_input_before_starting_ray(tmp_path, capsys, monkeypatch):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01")
    (tmp_path / "ok.txt").write_text("a text\n", encoding="utf-8")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = str(tmp_path / "out")
    runs = {
        ("--texts", "empty.txt"): "holds no texts",
        ("--texts", "bin.txt"): "binary",
        ("--texts", "ok.txt", "--model", "no-such-model-anywhere"): "Could not find model",
        ("--texts", "ok.txt", "--address", "ray://127.0.0.1:9"): "cannot reach Ray",
        ("--texts", "ok.txt", "--address", "bogus"): "not a Ray address",
        ("--texts", "ok.txt", "--model", MODEL, "--max-tokens", "100000"): "takes 4 to 256",
        ("--texts", "ok.txt", "--workers", "0"): "--workers 0",
    }
    for args, message in runs.items():
        args = [a if not a.endswith(".txt") else str(tmp_path / a) for a in args]
        assert cli.main(["atlas", *args, "--out", out]) == 2
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]  # after the model's loading bar, if it loaded
        assert last.startswith("attnviz atlas: ") and message in last and "Traceback" not in err
    for wait in ("soon", "0"):  # how long a run waits for a part (never forever)
        monkeypatch.setenv(STALL_ENV, wait)
        assert cli.main(["atlas", "--texts", str(tmp_path / "ok.txt"), "--out", out]) == 2
        assert f"{STALL_ENV}={wait!r}" in capsys.readouterr().err
    assert check_address(None) is None and check_address("auto") == "auto"


def test_a_batch_skips_and_lists_texts_over_the_limit(char_model):
    long = "长" * 300
    result = corpus.score_batch(char_model, [(0, "short one"), (1, long), (2, "short two")], 64)
    assert [i for i, _ in result["skipped"]] == [1] and "301 tokens > --max-tokens 64" in (
        result["skipped"][0][1]
    )
    assert sorted(set(result["sums"].text)) == [0, 2]
    want = roles.role_sums([trace_model(char_model, t) for t in ("short one", "short two")],
                           text_ids=[0, 2])  # fmt: skip
    pd.testing.assert_frame_equal(result["sums"], want)


def test_a_batch_of_lean_traces_scores_the_same(char_model, monkeypatch):
    """Long documents: past the budget's full-trace size every trace is lean, and the roles are
    read band by band; the atlas is the full traces' within float32 recomputation."""
    texts = [(0, roles.probe_texts("zh")["passage"][0][:250]), (1, "river pencil river pencil")]
    full = corpus.score_batch(char_model, texts, 256)["sums"]
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        assert trace_model(char_model, texts[0][1]).layers[0].in_bands
        lean = corpus.score_batch(char_model, texts, 256)["sums"]
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    shown = ["previous_token", "first_token", "self", "induction", "entropy"]
    a, b = roles.merge_sums(lean), roles.merge_sums(full)
    pd.testing.assert_frame_equal(a[shown], b[shown], atol=5e-5, rtol=1e-5)


def test_plan_sizes_workers_from_the_budget(char_model):
    p = plan(MODEL, None, 0)
    assert p.max_tokens == 256 and p.device == "cpu"  # the model's context
    params = sum(t.numel() * 4 for t in char_model.model.parameters())
    assert p.memory > params + budget_module.model_trace_need(char_model, 1, 256)


def test_plan_takes_a_model_a_notebook_loaded_by_its_name(char_model):
    # Regression: atlas_corpus(load_model(...), ...) failed with "load_model takes a Hub id, a
    # folder, None ...": the workers now load the model by the name it was loaded by.
    assert plan(char_model, None, 0) == plan(MODEL, None, 0)
    nameless = dataclasses.replace(char_model, name="model object")
    with pytest.raises(ValueError, match="by name"):
        plan(nameless, None, 0)


def test_a_folder_refuses_another_runs_parts(tmp_path):
    m = corpus.Manifest(MODEL, 256, 4, 10, "abc")
    corpus.Store.open(tmp_path, m)
    corpus.Store.open(tmp_path, m)  # the same run: fine
    with pytest.raises(ValueError, match="another run .*max_tokens"):
        corpus.Store.open(tmp_path, corpus.Manifest(MODEL, 128, 4, 10, "abc"))


def atlas_bytes(frame: pd.DataFrame, meta: dict | None) -> bytes:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if meta is not None:
        table = table.replace_schema_metadata({b"attnviz": json.dumps(meta).encode()})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_a_saved_atlas_is_opened_within_bounds(char_model):
    sums = corpus.score_batch(char_model, [(0, "a cat sat"), (1, "床前明月光")], 256)["sums"]
    meta = {"format": 1, "model": MODEL, "texts": [{"id": 0, "text": "a cat sat"}], "skipped": []}
    saved = corpus.open_atlas(atlas_bytes(sums, meta))
    pd.testing.assert_frame_equal(saved.sums, sums)
    assert saved.text(0)["text"] == "a cat sat" and saved.text(7) is None
    with pytest.raises(ValueError, match="opens at most"):
        corpus.open_atlas(atlas_bytes(sums, meta), max_bytes=1000)
    with pytest.raises(ValueError, match="not a Parquet file"):
        corpus.open_atlas(b"PAR1 not really" * 10)
    with pytest.raises(ValueError, match="not an attnviz corpus atlas"):
        corpus.open_atlas(atlas_bytes(pd.DataFrame({"x": [1]}), meta))
    with pytest.raises(ValueError, match="not an attnviz corpus atlas"):
        corpus.open_atlas(atlas_bytes(sums, None))
    with pytest.raises(ValueError, match="format 1"):
        corpus.open_atlas(atlas_bytes(sums, {"format": 99}))
    # Rows are bounded by the file's budget: a small file that unpacks to many rows is refused.
    many = pd.concat([sums] * 40, ignore_index=True)
    with pytest.raises(ValueError, match="too large here"):
        corpus.open_atlas(atlas_bytes(many, meta), max_bytes=len(many) * 32)


def test_a_finished_folder_is_merged_without_ray(char_model, tmp_path, monkeypatch):
    """The same command on a folder whose parts are all written only merges them: Ray is not
    started (it took a minute on a busy machine)."""
    from attnviz.serve import corpus_ray

    texts = roles.probe_list("en")[:3]
    manifest = corpus.Manifest(MODEL, 256, corpus_ray.batch_size(3), 3,
                               corpus_ray._corpus(texts).sha256)  # fmt: skip
    store = corpus.Store.open(tmp_path, manifest)
    for k in range(manifest.n_parts):
        ids = manifest.part_ids(k)
        store.write_part(k, corpus.score_batch(char_model, [(i, texts[i]) for i in ids], 256))

    def no_ray(address):
        raise AssertionError("Ray was started for a finished folder")

    monkeypatch.setattr(corpus_ray, "_connect", no_ray)
    frame = corpus_ray.atlas_corpus(MODEL, texts, tmp_path, progress=False)
    assert frame.equals(roles.merge_sums(corpus.open_atlas(tmp_path / "atlas.parquet").sums))
    assert len(frame) == 32 and (tmp_path / "heads.csv").exists()


def test_a_batch_tokenizes_each_text_once(char_model):
    """A text's token count and its trace come from one `prepare`: one call of the tokenizer."""
    calls = []

    class Counting:
        def __init__(self, tokenizer) -> None:
            self.tokenizer = tokenizer

        def __call__(self, texts, *args, **kwargs):
            calls.append(texts)
            return self.tokenizer(texts, *args, **kwargs)

        def __getattr__(self, name: str):
            return getattr(self.tokenizer, name)

    counted = dataclasses.replace(char_model, call_tokenizer=Counting(char_model.call_tokenizer))
    texts = ["a cat sat", "床前明月光"]
    result = corpus.score_batch(counted, list(enumerate(texts)), 256)
    assert calls == [[t] for t in texts] and not result["skipped"]
    assert result["tokens"] == {
        i: len(trace_model(char_model, t).tokens) for i, t in enumerate(texts)
    }
