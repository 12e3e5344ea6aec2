"""Tiny training runs in plain torch for the training lab: an induction head forming, and ÷√d_k.

The model is attention only (no MLP, no LayerNorm): token and learned position embeddings, a few
causal multi-head attention layers with residual connections (softmax through engine.attention's
one masked softmax), an unembedding. The data are repeated random sequences [x, x]: the second
half is predictable only by looking back at what followed the same token the first time, which
is what an induction head does (Olsson et al. 2022). Every run is seeded and stops at its step
count, its time limit or a stop request, whichever comes first. No streamlit, no threads here:
attnviz.serve.lab runs these in the background.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from attnviz.engine import validate
from attnviz.engine.attention import masked_softmax
from attnviz.engine.budget import budget, size

INDUCTION_THRESHOLD = 0.5  # a head "is" an induction head once its score passes this
# A run's wall-clock limit: the budget's lab_seconds (ATTNVIZ_LAB_SECONDS). How many runs train at
# once is the server's (attnviz.serve.settings: lab_runs).
LAB_SECONDS = float(budget().lab_seconds)
MAX_STEPS = 5000
HELD_OUT = 64  # sequences every measurement is made on (the same ones all run long)
LAB_WORK_PER_BUDGET = 20  # a run may do this many times the work of one trace (max_work)


@dataclass(frozen=True)
class LabConfig:
    """One training run's settings, checked when made (messages name the bad value and the rule).

    Defaults: the induction run, 2 layers of 4 heads, d_k 16, about 20 s on one CPU core."""

    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 64
    d_k: int = 16  # query/key size per head (values are d_model // n_heads)
    use_scale: bool = True  # divide q·k by √d_k
    vocab: int = 32  # random tokens drawn from this many
    half: int = 16  # each sequence is [x, x] with x this long
    batch: int = 32
    steps: int = 400
    lr: float = 1e-3
    seed: int = 0
    eval_every: int = 10  # steps between two measurements
    seconds: float = LAB_SECONDS  # stop after this much wall-clock time

    def __post_init__(self) -> None:
        validate.whole("n_layers", self.n_layers, 1, 4)
        validate.whole("n_heads", self.n_heads, 1, 8)
        validate.whole("d_model", self.d_model, 8, 256)
        validate.whole("d_k", self.d_k, 1, 1024)
        validate.flag("use_scale", self.use_scale)
        validate.whole("vocab", self.vocab, 4, 1024)
        validate.whole("half", self.half, 2, 64)
        validate.whole("batch", self.batch, 1, 256)
        validate.whole("steps", self.steps, 1, MAX_STEPS)
        validate.number("lr", self.lr, 1e-5, 0.1)
        validate.whole("seed", self.seed, 0, 2**31 - 1)
        validate.whole("eval_every", self.eval_every, 1, MAX_STEPS)
        validate.number("seconds", self.seconds, 0.1, LAB_SECONDS)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}: pick "
                f"{', '.join(str(h) for h in range(1, 9) if self.d_model % h == 0)}"
            )
        check_lab(self)

    @property
    def n_ctx(self) -> int:
        return 2 * self.half


def lab_bytes(config: LabConfig) -> int:
    """Parameters with their gradients and Adam's two moments, plus what one step keeps for
    backward (per layer: q, k, v, z, and each head's logits and weights)."""
    c, n = config, config.n_ctx
    d_v = c.d_model // c.n_heads
    params = (2 * c.vocab + n) * c.d_model + c.n_layers * c.d_model * c.n_heads * 2 * (c.d_k + d_v)
    acts = c.batch * c.n_layers * c.n_heads * n * (2 * c.d_k + 2 * d_v + 3 * n)
    acts += c.batch * n * (c.vocab + (c.n_layers + 1) * c.d_model)
    return 4 * (4 * params + acts)


def lab_work(config: LabConfig) -> float:
    """Floating-point operations of the whole run (forward and backward: about 3 forwards)."""
    c, n = config, config.n_ctx
    d_v = c.d_model // c.n_heads
    per_layer = 2 * n * c.d_model * c.n_heads * 2 * (c.d_k + d_v)  # projections
    per_layer += 2 * c.n_heads * n * n * (c.d_k + d_v)  # q·k and weights @ v
    forward = c.batch * (c.n_layers * per_layer + 2 * n * c.d_model * c.vocab)
    return 3.0 * forward * c.steps


def check_lab(config: LabConfig) -> None:
    """Refuse a run whose memory or work is over this server's budget, before building it."""
    need, limit = lab_bytes(config), budget().max_trace_bytes
    if need > limit:
        raise ValueError(
            f"this run needs about {size(need)} to train (batch {config.batch}, "
            f"{config.n_heads} heads of d_k={config.d_k}); this server allows {size(limit)}: "
            f"use a smaller batch, fewer heads or a smaller d_k"
        )
    flops, most = lab_work(config), LAB_WORK_PER_BUDGET * budget().max_work
    if flops > most:
        raise ValueError(
            f"this run is {flops / 1e12:.1f} TFLOP of work; this server allows "
            f"{most / 1e12:.1f}: use fewer steps, a smaller batch or a smaller model"
        )


def most_steps(**settings) -> int:
    """The most training steps a run with these settings (any LabConfig field but `steps`) may
    take on this server: its work grows with its steps (lab_work), its memory does not. 0 when
    even one step is refused (over the memory budget, or settings that break a rule)."""
    try:
        one = LabConfig(**{**settings, "steps": 1})
    except ValueError:
        one = None
    if one is None or lab_bytes(one) > budget().max_trace_bytes:
        return 0
    return min(MAX_STEPS, int(LAB_WORK_PER_BUDGET * budget().max_work // lab_work(one)))


class AttentionOnly(nn.Module):
    """Embeddings, `n_layers` causal attention layers added to the residual stream, unembedding."""

    def __init__(self, c: LabConfig) -> None:
        super().__init__()
        self.c = c
        d_v = c.d_model // c.n_heads
        self.embed = nn.Embedding(c.vocab, c.d_model)
        self.pos = nn.Embedding(c.n_ctx, c.d_model)
        self.w_q = nn.ModuleList(
            nn.Linear(c.d_model, c.n_heads * c.d_k, False) for _ in range(c.n_layers)
        )
        self.w_k = nn.ModuleList(
            nn.Linear(c.d_model, c.n_heads * c.d_k, False) for _ in range(c.n_layers)
        )
        self.w_v = nn.ModuleList(
            nn.Linear(c.d_model, c.n_heads * d_v, False) for _ in range(c.n_layers)
        )
        self.w_o = nn.ModuleList(
            nn.Linear(c.n_heads * d_v, c.d_model, False) for _ in range(c.n_layers)
        )
        self.unembed = nn.Linear(c.d_model, c.vocab, False)
        n = c.n_ctx
        self.register_buffer("mask", torch.ones(n, n, dtype=torch.bool).tril(), persistent=False)

    def forward(
        self, ids: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """(next-token logits [b, n, vocab], each layer's weights [b, head, n, n], each layer's
        attention logits [b, head, n, n] (scores · scale, before the mask))."""
        c = self.c
        b, n = ids.shape
        x = self.embed(ids) + self.pos.weight[:n]  # [b, n, d_model]
        weights, logits = [], []
        scale = 1 / math.sqrt(c.d_k) if c.use_scale else 1.0
        for layer in range(c.n_layers):
            q = self.w_q[layer](x).view(b, n, c.n_heads, -1).transpose(1, 2)  # [b, head, n, d_k]
            k = self.w_k[layer](x).view(b, n, c.n_heads, -1).transpose(1, 2)  # [b, head, n, d_k]
            v = self.w_v[layer](x).view(b, n, c.n_heads, -1).transpose(1, 2)  # [b, head, n, d_v]
            a = (q @ k.transpose(-1, -2)) * scale  # [b, head, n, n]
            a.retain_grad() if a.requires_grad else None
            # masked at -inf first: masked_softmax's own mask step works in place (no backward)
            w = masked_softmax(a.masked_fill(~self.mask[:n, :n], float("-inf")), None)
            z = (w @ v).transpose(1, 2).reshape(b, n, -1)  # [b, n, head * d_v]
            x = x + self.w_o[layer](z)  # [b, n, d_model]
            weights.append(w)
            logits.append(a)
        return self.unembed(x), weights, logits  # [b, n, vocab]


def repeated_batch(c: LabConfig, gen: torch.Generator, batch: int | None = None) -> torch.Tensor:
    """`batch` (default: the config's) sequences [x, x], x of `half` random tokens. [b, 2 * half]"""
    x = torch.randint(0, c.vocab, (batch or c.batch, c.half), generator=gen)  # [b, half]
    return torch.cat([x, x], dim=1)  # [b, 2 * half]


def induction_scores(weights: torch.Tensor, half: int) -> torch.Tensor:
    """Per head: the mean weight a token of the second half puts on the token that followed its
    first occurrence (query half + j looks at key j + 1). weights [b, head, n, n] -> [head]"""
    j = torch.arange(half - 1)  # [half - 1]
    return weights[:, :, half + j, j + 1].mean(dim=(0, 2))  # [head]


def saturation(weights: torch.Tensor) -> tuple[float, float]:
    """(mean over rows of the largest weight, mean row entropy in nats) of [b, head, n, n] causal
    weights, skipping the first row (one key: always weight 1)."""
    w = weights[:, :, 1:]  # [b, head, n - 1, n]
    entropy = -(w * torch.log(w.clamp_min(1e-30))).sum(-1)  # [b, head, n - 1]
    return float(w.amax(-1).mean()), float(entropy.mean())


@dataclass
class Point:
    """What one measured step recorded."""

    step: int
    seconds: float  # since the run started
    loss: float  # next-token loss on the repeated half of a held-out batch
    loss_first: float  # ... and on the first (unpredictable) half: about ln(vocab)
    induction: list[float]  # [head] of the last layer
    max_weight: float  # mean largest weight per row, all layers
    entropy: float  # mean row entropy, all layers
    grad_logits: float  # ‖∂loss/∂(attention logits)‖ of the training step, all layers
    grad_qk: float  # ‖∂loss/∂(W_Q, W_K)‖ of the training step, all layers


@dataclass
class LabResult:
    config: LabConfig
    points: list[Point] = field(default_factory=list)
    stopped: str = "done"  # "done", "time" (the time limit) or "stopped" (asked to)
    seconds: float = 0.0
    steps_done: int = 0

    def crossed(self, threshold: float = INDUCTION_THRESHOLD) -> int | None:
        """The first measured step where some last-layer head's induction score passed
        `threshold`, or None."""
        return next((p.step for p in self.points if max(p.induction) >= threshold), None)


def _norm(tensors) -> float:
    return float(
        torch.sqrt(sum((t.grad.double() ** 2).sum() for t in tensors if t.grad is not None))
    )


def train(
    config: LabConfig,
    on_point: Callable[[Point], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> LabResult:
    """Train `config` from its seed and measure it every `eval_every` steps (and at step 0).
    `on_point` gets each Point as it is measured; `stop()` returning True ends the run early."""
    result = LabResult(config=config)
    for point in run(config, result, stop):
        if on_point is not None:
            on_point(point)
    return result


def run(
    config: LabConfig, result: LabResult, stop: Callable[[], bool] | None = None
) -> Iterator[Point]:
    """The training loop as a generator of Points (also appended to `result`), so that a caller
    can step two runs in turn and draw both as they go. The time limit counts this run's own
    steps only."""
    c = config
    torch.manual_seed(c.seed)
    model = AttentionOnly(c)
    opt = torch.optim.Adam(model.parameters(), lr=c.lr)
    data = torch.Generator().manual_seed(c.seed + 1)
    held_out = repeated_batch(c, torch.Generator().manual_seed(10**6 + c.seed), HELD_OUT)
    loss_fn = nn.CrossEntropyLoss()
    spent = 0.0
    for step in range(c.steps + 1):
        began = time.perf_counter()
        ids = repeated_batch(c, data)  # [b, n]
        out, _, logits = model(ids)
        loss = loss_fn(out[:, :-1].reshape(-1, c.vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        point = None
        if step % c.eval_every == 0 or step == c.steps:
            point = _measure(model, held_out, c, step, spent)
            point.grad_logits = math.sqrt(sum(float((a.grad.double() ** 2).sum()) for a in logits))
            point.grad_qk = _norm([*model.w_q.parameters(), *model.w_k.parameters()])
            result.points.append(point)
        if step < c.steps:
            opt.step()
            result.steps_done = step + 1
        spent += time.perf_counter() - began
        result.seconds = spent
        if point is not None:
            yield point
        if step == c.steps:
            return
        if stop is not None and stop():
            result.stopped = "stopped"
            return
        if spent > c.seconds:
            result.stopped = "time"
            return


def _measure(model: AttentionOnly, ids: torch.Tensor, c: LabConfig, step: int, t: float) -> Point:
    with torch.no_grad():
        out, weights, _ = model(ids)
        lp = torch.log_softmax(out[:, :-1], -1)  # [b, n - 1, vocab]
        nll = -lp.gather(-1, ids[:, 1:, None])[..., 0]  # [b, n - 1] loss of predicting token i+1
        sat = [saturation(w) for w in weights]
        return Point(
            step=step,
            seconds=t,
            loss=float(nll[:, c.half :].mean()),  # predicting tokens half+1 ..: the repeat
            loss_first=float(nll[:, : c.half - 1].mean()),
            induction=induction_scores(weights[-1], c.half).tolist(),
            max_weight=sum(s[0] for s in sat) / len(sat),
            entropy=sum(s[1] for s in sat) / len(sat),
            grad_logits=0.0,
            grad_qk=0.0,
        )
