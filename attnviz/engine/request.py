"""What a trace is asked for with: one frozen object from the page to the cache to the forward.

A `TraceRequest` names the model (the toy stack's StackConfig, or a loaded model's key), the text,
the optional second text and the what-if `Knobs`. It is hashable, so the same object is the cache
key of the trace, the group a batch of requests shares (`group`), and the work item a trace
worker runs; the Trace it gives remembers it (`Trace.request`). Nothing here imports transformers.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, replace

from attnviz.engine import validate


@dataclass(frozen=True)
class Knobs:
    """What-if settings of one call; travels to every layer in the `attnviz_call` keyword."""

    use_scale: bool = True  # False: logits are raw q·k (scale 1)
    temperature: float = 1.0  # logits are divided by it
    ablate: frozenset[tuple[int, int]] = frozenset()  # (layer, head) whose z is zeroed before W_O
    mask_tokens: tuple[int, ...] = ()  # key positions no query may attend to
    # The attention blocks (layer numbers as in `ablate`) whose keys `mask_tokens` hides; None: all.
    # An encoder-decoder hides source tokens: encoder self-attention and cross-attention only.
    hide_in: frozenset[int] | None = None
    # Record a lean trace (attnviz.engine.lean): q, k, v, z, the mask rule and the log-sum-exp,
    # the output computed blockwise; no n x n tensor. tracing decides, by bytes (budget.lean_trace).
    lean: bool = False

    def heads_off(self, layer: int) -> list[int]:
        return sorted(h for (i, h) in self.ablate if i == layer)

    @classmethod
    def checked(
        cls,
        use_scale: object = True,
        temperature: object = 1.0,
        ablate: object = (),
        mask_tokens: object = (),
    ) -> Knobs:
        """The what-if knobs a caller gave, checked and in their canonical types (validate.knobs):
        equal settings give equal (and equally hashed) Knobs."""
        return cls(*validate.knobs(use_scale, temperature, ablate, mask_tokens))

    @property
    def changes_inputs(self) -> bool:
        """Whether these knobs change what the model reads (hidden tokens), not only its maths."""
        return bool(self.mask_tokens)


@dataclass(frozen=True)
class TraceRequest:
    """One trace asked for. `model`: what identifies the model, a StackConfig for the toy stack
    or a loaded model's `key` (name, device, dtype); `pair`: the second text, or None (a blank
    one is None); `knobs`: the what-if settings (Knobs.checked). `max_length`: tokens per input
    (None: as many as the model and this server's budget allow)."""

    model: Hashable
    text: str
    pair: str | None = None
    knobs: Knobs = field(default_factory=Knobs)
    max_length: int | None = None

    def __post_init__(self) -> None:
        validate.text("text", self.text)
        pair = validate.optional_text("text_pair", self.pair)
        object.__setattr__(self, "pair", pair if pair and pair.strip() else None)
        if not isinstance(self.knobs, Knobs):
            raise TypeError(f"knobs must be Knobs, not {type(self.knobs).__name__}")

    @classmethod
    def of(
        cls, model: Hashable, text: str, pair: str | None = None, max_length=None, **knobs
    ) -> TraceRequest:
        """A request with its knobs given as keywords (use_scale, temperature, ablate,
        mask_tokens), checked."""
        request = cls(model, text, pair, Knobs(), max_length)  # the texts are checked first
        return replace(request, knobs=Knobs.checked(**knobs))

    @property
    def group(self) -> Hashable:
        """What requests must share to be run in one forward: the model, the knobs and the limit
        (whether they may at all is the model's: attnviz.engine.hooked.tracing.may_share)."""
        return (self.model, self.knobs, self.max_length)
