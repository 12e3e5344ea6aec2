"""The training loop: AdamW, warm-up then cosine, windows cut at seeded offsets from each stream,
validation loss on fixed windows. Plain PyTorch; CPU or GPU."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnviz.training.chars import BOS
from attnviz.training.model import TrainConfig, build

VAL_SEED = 1  # the validation windows: the same for every run and stage


@dataclass
class Run:
    """What a run produced: the model and its history (step, train loss, val loss per stream)."""

    model: torch.nn.Module
    config: TrainConfig
    train_loss: list[tuple[int, float]] = field(default_factory=list)
    val_loss: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    seconds: float = 0.0
    steps_done: int = 0
    stopped: bool = False


def windows(
    data: torch.Tensor, n: int, context: int, gen: torch.Generator
) -> torch.Tensor:  # [n, context]
    """`n` windows of [BOS] + (context - 1) ids, starting at seeded offsets of `data`."""
    span = context - 1
    if data.numel() <= span:
        data = torch.cat([data] * (span // max(data.numel(), 1) + 2))
    starts = torch.randint(0, data.numel() - span, (n,), generator=gen)  # [n]
    idx = starts[:, None] + torch.arange(span)[None, :]  # [n, span]
    bos = torch.full((n, 1), BOS, dtype=data.dtype)
    return torch.cat([bos, data[idx]], dim=1)  # [n, context]


def loss_of(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position after [BOS]."""
    logits = model(input_ids=x).logits  # [b, t, vocab]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: dict[str, torch.Tensor]) -> dict[str, float]:
    model.eval()
    out = {s: round(float(loss_of(model, x)), 5) for s, x in batches.items()}
    model.train()
    return out


def train(
    cfg: TrainConfig,
    train_ids: dict[str, torch.Tensor],
    val_ids: dict[str, torch.Tensor],
    device: str = "cpu",
    progress: Callable[[int, float], None] | None = None,
    stop: threading.Event | None = None,
    init: torch.nn.Module | None = None,
) -> Run:
    """Train a fresh model (or go on training `init`, with a fresh optimizer) on `train_ids` (a
    1-D id tensor per stream), seeded by cfg.seed.

    Deterministic on the CPU (torch's deterministic algorithms on, one data generator); `stop`
    ends the run early after the current step, keeping what was learnt.
    """
    torch.manual_seed(cfg.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    model = (build(cfg) if init is None else init).to(device)
    model.config._attn_implementation = "sdpa"  # training speed; traces use "attnviz" later
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        foreach=False,
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    val_gen = torch.Generator().manual_seed(VAL_SEED)
    val_batches = {
        s: windows(val_ids[s], cfg.eval_windows, cfg.context, val_gen).to(device)
        for s, _ in cfg.mix
    }
    names = [s for s, _ in cfg.mix]
    weights = torch.tensor([w for _, w in cfg.mix])
    run = Run(model=model, config=cfg)
    start = time.perf_counter()
    for step in range(cfg.steps):
        picks = torch.multinomial(weights, cfg.batch, replacement=True, generator=gen)  # [batch]
        x = torch.cat(
            [
                windows(train_ids[names[i]], int((picks == i).sum()), cfg.context, gen)
                for i in range(len(names))
            ]
        ).to(device)  # [batch, context]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = loss_of(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        value = float(loss.detach())
        run.train_loss.append((step, round(value, 5)))
        run.steps_done = step + 1
        if progress is not None:
            progress(step, value)
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            run.val_loss.append((step + 1, evaluate(model, val_batches)))
        if stop is not None and stop.is_set():
            run.stopped = True
            break
    run.seconds = time.perf_counter() - start
    model.eval()
    return run
