"""Loading a pretrained model with attention implementation "attnviz", offline-first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnviz.engine.collector import paused as collector_paused

with collector_paused():  # transformers' model code: ~10^6 objects (engine/collector.py)
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
        PreTrainedModel,
    )

from attnviz.engine import validate
from attnviz.engine.budget import budget
from attnviz.engine.budget import size as size_text
from attnviz.engine.hooked import gguf_cache, tokenizing
from attnviz.engine.hooked.families import (
    BERT_FAMILY,
    BLOCK_PATHS,
    DEFAULT_NAME,
    KINDS,
    ROBERTA_POSITIONS,
    UNSUPPORTED,
)
from attnviz.engine.hooked.finding import offline, resolve
from attnviz.engine.hooked.intercept import IMPL, catch_outputs
from attnviz.engine.hooked.onednn import use_onednn
from attnviz.i18n import Message

AUTO_CLASSES = {
    "encoder": AutoModel,
    "decoder": AutoModelForCausalLM,
    "encoder-decoder": AutoModelForSeq2SeqLM,
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, eq=False)
class Block:
    """One attention block of a loaded model: where it sits and the modules that compute it."""

    part: str  # "encoder", "decoder" or "cross" (families.ENCODER, DECODER, CROSS)
    layer: int  # its layer inside that part
    attention: Any  # the module that calls AttentionInterface
    w_o: Any  # the projection applied to concat(z): nn.Linear, or GPT-2's Conv1D ([in, out])
    n_heads: int
    n_kv_heads: int

    def __post_init__(self) -> None:
        if self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}")


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model in eval mode, attention implementation "attnviz", its tokenizer and its blocks."""

    model: Any  # transformers PreTrainedModel (BertModel, GPT2LMHeadModel, LlamaForCausalLM, ...)
    tokenizer: Any
    name: str  # the Hub id or folder it came from
    device: str
    max_length: int  # the most tokens one input may have (special tokens included)
    n_layers: int
    n_heads: int
    d_head: int
    model_type: str = "bert"
    kind: str = "encoder"  # "encoder", "decoder" (causal LM) or "encoder-decoder"
    # Every attention block in trace order (for an encoder-decoder: encoder, decoder, cross).
    blocks: tuple[Block, ...] = ()
    n_kv_heads: int | None = None  # None: n_heads (MHA); fewer: GQA, 1: MQA
    # A fast tokenizer stores truncation and padding as settings on itself, so concurrent calls with
    # different settings would mix (or fail with "Already borrowed"): traces tokenize with their own
    # copy, one call at a time (tokenizing takes well under a millisecond).
    call_tokenizer: Any = field(default=None, repr=False)
    call_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.call_tokenizer is None:
            object.__setattr__(self, "call_tokenizer", tokenizing.call_copy(self.tokenizer))

    @property
    def key(self) -> tuple[str, str, str]:
        """What names this loaded copy in a TraceRequest: (name, device, dtype)."""
        return (self.name, self.device, str(self.model.dtype).removeprefix("torch."))

    @property
    def layers(self) -> Any:
        """The layer list of the first (for BERT: the only) stack."""
        return _get(self.model.base_model, BLOCK_PATHS[self.model_type][0][1])

    @property
    def n_blocks(self) -> int:
        """Attention blocks in all (an encoder-decoder: encoder + decoder self + cross)."""
        return len(self.blocks) or self.n_layers


def _get(root: Any, path: str) -> Any:
    for name in path.split("."):
        root = getattr(root, name)
    return root


def _blocks(model: Any, model_type: str, config: Any) -> tuple[Block, ...]:
    """The family's attention blocks, checked: each calls AttentionInterface and has a W_O."""
    blocks = []
    for part, layers_path, attn_path, w_o_path in BLOCK_PATHS[model_type]:
        for i, layer in enumerate(_get(model.base_model, layers_path)):
            attn, w_o = _get(layer, attn_path), _get(layer, w_o_path)
            d_in = w_o.weight.shape[0] if type(w_o).__name__ == "Conv1D" else w_o.weight.shape[1]
            n_heads = (
                getattr(attn, "num_heads", None)
                or getattr(attn, "num_attention_heads", None)
                or config_heads(config, part)
            )
            n_kv = n_heads // getattr(attn, "num_key_value_groups", 1)
            if getattr(attn, "layer_idx", None) != i or d_in % n_heads:
                raise ValueError(f"{part} layer {i} is not built as attnviz expects ({attn_path})")
            blocks.append(Block(part, i, attn, w_o, n_heads, n_kv))
    return tuple(blocks)


def config_heads(config: Any, part: str) -> int:
    if part == "encoder" and hasattr(config, "encoder_attention_heads"):
        return config.encoder_attention_heads
    if hasattr(config, "decoder_attention_heads"):
        return config.decoder_attention_heads
    return config.num_attention_heads


def model_bytes(config: Any, dtype: torch.dtype = torch.float32) -> int:
    """The parameters' size in bytes, from the config alone: the model is built on the meta
    device (no memory, no weights read) and its distinct parameters counted."""
    kind = KINDS.get(config.model_type, "encoder")
    with torch.device("meta"):
        shell = AUTO_CLASSES[kind].from_config(config)
    params = {id(p): p for p in shell.parameters()}.values()  # tied weights count once
    return sum(p.numel() for p in params) * torch.empty((), dtype=dtype).element_size()


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


def _max_length(config: Any, tokenizer: Any) -> int:
    positions = getattr(config, "max_position_embeddings", None) or config.n_positions
    if config.model_type in ROBERTA_POSITIONS:
        positions -= (config.pad_token_id or 0) + 1
    if config.model_type not in BERT_FAMILY:  # decoders know 10^5 positions; a trace holds n^2
        positions = min(positions, budget().max_tokens)
    tok_limit = tokenizer.model_max_length
    return min(positions, tok_limit) if tok_limit and tok_limit < 10**6 else positions


def _dtype(dtype: str | torch.dtype, dev: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if dev.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: use 'auto' (bfloat16 on GPU), {', '.join(DTYPES)}")
    return DTYPES[dtype]


def _check_family(label: str, config: Any) -> None:
    kind = config.model_type
    if kind in UNSUPPORTED:
        raise ValueError(f"{label!r} is a {kind!r} model, not supported: {UNSUPPORTED[kind]}.")
    if kind not in BLOCK_PATHS:
        raise ValueError(
            f"{label!r} is a {kind!r} model; attnviz traces these families: "
            f"{', '.join(sorted(BLOCK_PATHS))}."
        )
    if kind in BERT_FAMILY and getattr(config, "add_cross_attention", False):
        raise ValueError(f"{label!r} has cross-attention layers; attnviz traces encoders only.")
    for name in ("attn_logit_softcapping", "use_alibi", "alibi"):
        if getattr(config, name, None):
            raise ValueError(f"{label!r} uses {name}, which attnviz's softmax(q·k·scale) drops.")


def _hf_tokenizer(model: Any, tokenizer: Any) -> Any:
    """The tokenizer given, or the one saved beside the model (from its folder or the local
    cache; from the hub, HF_ENDPOINT honoured, only when online)."""
    if tokenizer is not None:
        return tokenizer
    where = getattr(model.config, "name_or_path", "") or ""
    if not where:
        raise ValueError("this model object has no name_or_path: pass tokenizer=... as well")
    try:
        return AutoTokenizer.from_pretrained(where, local_files_only=offline())
    except (OSError, ValueError) as e:
        raise ValueError(f"no tokenizer found for {where!r} ({e}): pass tokenizer=...") from e


def _from_object(model: Any, tokenizer: Any, device: str | torch.device) -> LoadedModel:
    """A model object the caller already has (e.g. AutoModel.from_pretrained(...)), switched to
    attention implementation "attnviz" in place: it computes the same outputs, and records them."""
    if not isinstance(model, PreTrainedModel):
        raise TypeError(
            f"load_model takes a Hub id, a folder, None or a transformers model object, not "
            f"{type(model).__name__}"
        )
    config, label = model.config, getattr(model.config, "name_or_path", "") or "model object"
    _check_family(label, config)
    tokenizer = _hf_tokenizer(model, tokenizer)
    model.set_attn_implementation(IMPL)
    dev = model.device if str(device) == "auto" else _pick_device(device)
    model.to(dev).eval().requires_grad_(False)
    return _loaded(model, tokenizer, label, dev)


def load_model(
    name: str | PreTrainedModel | None = None,
    device: str | torch.device = "auto",
    progress: Callable[[str], None] | None = None,
    dtype: str | torch.dtype = "float32",
    tokenizer: Any = None,
) -> LoadedModel:
    """Load a model with attention implementation "attnviz", in eval mode.

    `name` may also be a transformers model object you already loaded (its tokenizer is found
    beside it, or pass `tokenizer=`): it is switched to the "attnviz" attention implementation
    in place and moved to `device` ("auto" keeps it where it is). A Hub id is fetched from
    HF_ENDPOINT (a mirror) when that is set, as huggingface_hub does.

    Encoders of the BERT family, decoders (GPT-2, Llama, Mistral, Qwen2/3, Gemma 1 and 3, ...)
    and encoder-decoders (BART): families.BLOCK_PATHS lists them. None loads the bundled
    all-MiniLM-L6-v2 offline; a name is a local folder or a Hugging Face id (taken from the local
    cache, else from the Hub if online; fails fast with a ValueError when it cannot be found), a
    .gguf file or a folder holding one, or a registry LLM ("smollm2-135m", "gemma-3-270m",
    installed by `attnviz models`): a GGUF is checked, then converted once into a cache
    (engine/hooked/gguf_cache.py; progress says so, on stderr when `progress` is None).
    Never runs remote code; prefers safetensors; refuses a model whose parameters exceed the
    budget (ATTNVIZ_MAX_MODEL_BYTES) before reading its weights. `dtype`: "float32" (exact),
    "bfloat16", "float16" or "auto" (bfloat16 on GPU); traces are float32 either way.
    `progress` gets short messages: English strings that are attnviz.i18n.Messages, so a page can
    show them in its language.
    """
    if name is not None and not isinstance(name, str):
        return _from_object(name, tokenizer, validate.device(device))
    name, device = validate.model_name(name), validate.device(device)
    gguf = gguf_cache.source(name)  # a registry LLM, a .gguf file or a folder holding one
    if gguf is None:
        validate.model_folder(name)
    dev = _pick_device(device)
    torch_dtype = _dtype(dtype, dev)
    label = name or DEFAULT_NAME
    _say(progress, Message("load.finding", name=label))
    if gguf is not None:  # converted once into a checked cache folder (engine/hooked/gguf_cache)
        source, local_only, safetensors = str(gguf_cache.converted(gguf, progress)), True, True
    else:
        source, local_only, safetensors = resolve(name)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=local_only)
    except (OSError, ValueError) as e:
        raise ValueError(f"Could not read a model config from {label!r}: {e}") from e
    _check_family(label, config)
    size, limit = model_bytes(config, torch_dtype), budget().max_model_bytes
    if size > limit:
        raise ValueError(
            f"{label!r} needs {size_text(size, 2)} for its parameters in "
            f"{str(torch_dtype)[6:]}, over this server's budget of {size_text(limit, 2)} "
            "(ATTNVIZ_MAX_MODEL_BYTES): pick a smaller model or a smaller dtype."
        )
    kind = KINDS[config.model_type]
    with collector_paused():
        try:
            _say(progress, Message("load.tokenizer", name=label))
            tokenizer = tokenizing.read(source, local_only)
            _say(progress, Message("load.weights", name=label))
            model = AUTO_CLASSES[kind].from_pretrained(
                source,
                config=config,
                attn_implementation=IMPL,
                dtype=torch_dtype,
                use_safetensors=safetensors,
                local_files_only=local_only,
            )
        except OSError as e:  # e.g. a folder or cache entry with the config but not the files
            raise ValueError(f"Could not load the tokenizer and weights of {label!r}: {e}") from e
        model.to(dev).eval().requires_grad_(False)  # inference only: trace and weights mix
        _say(progress, Message("load.done", name=label, device=str(dev)))
        return _loaded(model, tokenizer, label, dev)


def _loaded(model: Any, tokenizer: Any, label: str, dev: torch.device) -> LoadedModel:
    """The LoadedModel of a model already in eval mode with attention implementation "attnviz"."""
    config = model.config
    kind = KINDS[config.model_type]
    try:
        blocks = _blocks(model, config.model_type, config)
    except (AttributeError, TypeError) as e:
        raise ValueError(f"{label!r} is not built like a {config.model_type} model: {e}") from e
    catch_outputs([b.w_o for b in blocks])  # hooked here, while no forward runs (tracing: why)
    use_onednn(model)  # float32 on the CPU: oneDNN's matmul, ~1.7x MKL's on AMD (onednn.py)
    call_tokenizer = tokenizing.call_copy(tokenizer)
    call_tokenizer.padding_side = "right"  # positions count from the first token
    if call_tokenizer.pad_token is None:  # GPT-2 and Llama tokenizers have none
        call_tokenizer.pad_token = call_tokenizer.eos_token or call_tokenizer.unk_token
    first = blocks[0]
    n_kv = first.n_kv_heads if first.n_kv_heads != first.n_heads else None
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=label,
        device=str(dev),
        max_length=_max_length(config, tokenizer),
        n_layers=sum(b.part == first.part for b in blocks),
        n_heads=first.n_heads,
        d_head=getattr(first.attention, "attention_head_size", None)
        or getattr(first.attention, "head_dim", None)
        or config.hidden_size // first.n_heads,
        model_type=config.model_type,
        kind=kind,
        blocks=blocks,
        n_kv_heads=n_kv,
        call_tokenizer=call_tokenizer,
    )
