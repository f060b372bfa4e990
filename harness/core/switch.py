"""Giving a model's modules of known transformers classes another forward, once each class has passed a check."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import torch


def switch_forward(model: torch.nn.Module, known: Iterable[str], same_bits: Callable[[Any], bool],
                   forward: Callable[..., Any], applies: Callable[[Any], bool] = lambda module: True) -> int:
    """Bind ``forward`` to each module of ``model`` whose class is named in ``known`` (and that ``applies`` to),
    once ``same_bits`` has passed on the first module of its class; a module already switched is left alone.
    Returns how many were switched."""
    names = set(known)
    checked: dict[type, bool] = {}
    count = 0
    for module in model.modules():
        cls = type(module)
        if cls.__name__ not in names or "forward" in vars(module) or not applies(module):
            continue
        if cls not in checked:
            checked[cls] = same_bits(module)
        if checked[cls]:
            module.forward = types.MethodType(forward, module)
            count += 1
    return count
