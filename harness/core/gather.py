"""A sharded rollout gathers once: the FSDP2 units of a model all-gathered for a whole rollout.

Apart from :mod:`harness.core.parallel` (which joins the job and shards), so the trainer can use it
without importing the distributed set-up.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

GATHER_ONCE_FRACTION = 0.5  # the whole model may take at most this share of a device's memory during a rollout


def is_fsdp(module: torch.nn.Module) -> bool:
    """``module`` is an FSDP2 unit. A module can only be one once ``torch.distributed.fsdp`` is imported (it does
    the wrapping), so an unsharded run never imports it (with torch's compiler stack: about 1 s) to learn that no
    module is one."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(module, fsdp.FSDPModule)


def _units(model: torch.nn.Module) -> list[Any]:
    return [m for m in model.modules() if is_fsdp(m)]


def sharded_units(model: torch.nn.Module) -> list[Any]:
    """The FSDP2 units of ``model`` that shard parameters of their own (one all-gather each)."""
    return [u for u in _units(model) if u._get_fsdp_state()._fsdp_param_group is not None]  # noqa: SLF001


def gather_once(model: torch.nn.Module, device_memory_bytes: float | None) -> tuple[bool, str]:
    """Whether a rollout of the sharded ``model`` gathers every unit once (the whole model at most
    :data:`GATHER_ONCE_FRACTION` of the device's memory; always on the host), and the manifest's notice."""
    units = sharded_units(model)
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    if device_memory_bytes is not None and full > GATHER_ONCE_FRACTION * device_memory_bytes:
        return False, (f"rollout: units gathered layer by layer for every forward (the whole model, {full / 1e9:.2f} "
                       f"GB, is over {GATHER_ONCE_FRACTION:.0%} of the device's {device_memory_bytes / 1e9:.0f} GB)")
    return True, (f"rollout: every FSDP2 unit gathered once per rollout ({len(units)} all-gathers, {full / 1e9:.2f} GB "
                  "per rank), decode without collectives")


@contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Every FSDP2 unit of ``model`` all-gathered once and kept whole until the block ends, then resharded: the
    forwards inside gather nothing. Each unit's own reshard-after-forward setting is restored after.

    Inside the block the units' forward hooks are detached (:func:`_hooks_detached`): the module is then a plain
    module over whole parameters, so a decode step issues no collective and no stream synchronisation, and a
    CUDA graph can capture it (FSDP2's root pre-forward makes its all-gather streams wait on the current one,
    which a capture cannot hold). Only no-grad forwards belong inside (no backward hook is registered)."""
    units = _units(model)
    groups = [u._get_fsdp_state()._fsdp_param_group for u in units]  # noqa: SLF001 - FSDP2's per-unit state
    saved = [g.post_forward_mesh_info if g is not None else None for g in groups]
    for u in units:
        u.set_reshard_after_forward(False, recurse=False)
    for u in units:
        u.unshard()
    try:
        with _hooks_detached(units):
            yield
    finally:
        for u in units:
            u.reshard()
        for g, info in zip(groups, saved):
            if g is not None:
                g.post_forward_mesh_info = info


@contextmanager
def _hooks_detached(units: list[Any]) -> Iterator[None]:
    """FSDP2's forward pre- and post-hooks taken off every unit for the block, then put back in their order."""
    saved: list[tuple[dict[int, Any], dict[int, Any]]] = []
    for u in units:
        state = u._get_fsdp_state()  # noqa: SLF001
        for hooks in (u._forward_pre_hooks, u._forward_hooks):  # noqa: SLF001 - nn.Module's hook tables
            ours = [k for k, h in hooks.items() if getattr(h, "__self__", None) is state]
            if not ours:
                raise RuntimeError(f"FSDP2 unit {type(u).__name__}: no forward hook of its state to detach")
            saved.append((hooks, dict(hooks)))
            for k in ours:
                del hooks[k]
    try:
        yield
    finally:
        for hooks, before in saved:
            hooks.clear()
            hooks.update(before)
