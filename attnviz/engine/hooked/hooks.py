"""Forward hooks that read a call's keyword arguments, safe while other threads run the same model.

torch adds a hook registered `with_kwargs=True` to the module's hooks first and marks it as taking
keyword arguments a moment later (and unmarks it first on removal): a forward running in another
thread in between calls it without them, and a hook written for (module, args, kwargs, output)
raised TypeError in that other session's forward (tests/test_class_isolation.py, eight SmolLM2
sessions at once). Such a call always comes from another thread's forward, which every hook here
leaves alone: it is answered with None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def forward_hook(module: torch.nn.Module, fn: Callable[..., Any]):
    """module.register_forward_hook(fn, with_kwargs=True); fn(module, args, kwargs, output)."""

    def hook(mod, args, *rest):
        return fn(mod, args, *rest) if len(rest) == 2 else None

    return module.register_forward_hook(hook, with_kwargs=True)


def forward_pre_hook(module: torch.nn.Module, fn: Callable[..., Any]):
    """module.register_forward_pre_hook(fn, with_kwargs=True); fn(module, args, kwargs)."""

    def hook(mod, args, *rest):
        return fn(mod, args, *rest) if len(rest) == 1 else None

    return module.register_forward_pre_hook(hook, with_kwargs=True)
