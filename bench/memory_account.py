"""Where a training step's memory goes: tensors saved for the backward, by module, and (CUDA) the live blocks at peak.

Two views, both for one forward + backward:

- :class:`SavedTensors` — every tensor autograd saves for the backward (``torch.autograd.graph.saved_tensors_hooks``),
  attributed to the innermost module whose forward was running, counted once per storage. Works on any device,
  so it is checked on the CPU; what a compiled or checkpointed region keeps inside itself is not seen.
- :func:`cuda_peak_blocks` — with ``torch.cuda.memory._record_memory_history`` on, the allocator's trace replayed
  to its peak: the blocks live at that moment, grouped by the first stack frame in model or harness code.

Used by ``bench/grpo_step.py --memory-step N`` (writes ``<out>/memory-ours-stepN.txt``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def _pattern(name: str) -> str:
    """``model.layers.3.mlp.experts`` -> ``model.layers.*.mlp.experts`` (one row for all layers)."""
    return _LAYER_INDEX.sub(".*.", name + ".").rstrip(".")


class SavedTensors:
    """Bytes saved for the backward per module, while :attr:`active` (one storage counted once)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.names = {m: n or "<root>" for n, m in model.named_modules()}
        self.stack: list[str] = []
        self.active = False
        self.seen: dict[tuple[str, int], tuple[str, int, tuple[int, ...], str]] = {}
        # weights saved for the backward are not activations
        self.weights = {(str(p.device), p.untyped_storage().data_ptr()) for p in model.parameters()}

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        if module in self.names:
            self.stack.append(self.names[module])

    def _post(self, module: torch.nn.Module, args: Any, out: Any) -> None:
        if module in self.names and self.stack:
            self.stack.pop()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if self.active and isinstance(t, torch.Tensor) and t.device.type != "meta":
            try:
                storage = t.untyped_storage()
                key = (str(t.device), storage.data_ptr())
                if key not in self.seen and key not in self.weights and storage.nbytes():
                    where = self.stack[-1] if self.stack else "<outside modules>"
                    self.seen[key] = (where, storage.nbytes(), tuple(t.shape), str(t.dtype).replace("torch.", ""))
            except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
                pass
        return t

    @contextmanager
    def recording(self) -> Iterator[SavedTensors]:
        pre = torch.nn.modules.module.register_module_forward_pre_hook(self._pre)
        post = torch.nn.modules.module.register_module_forward_hook(self._post)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield self
        finally:
            pre.remove()
            post.remove()

    def total(self) -> int:
        return sum(b for _, b, _, _ in self.seen.values())

    def by_module(self) -> list[tuple[str, int, int]]:
        """(module pattern, bytes, tensors), largest first."""
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for where, nbytes, _, _ in self.seen.values():
            acc[_pattern(where)][0] += nbytes
            acc[_pattern(where)][1] += 1
        return sorted(((k, v[0], v[1]) for k, v in acc.items()), key=lambda r: -r[1])

    def largest(self, n: int = 20) -> list[tuple[str, int, tuple[int, ...], str]]:
        return sorted(self.seen.values(), key=lambda r: -r[1])[:n]

    def report(self, title: str) -> str:
        gb = 1e9
        lines = [f"## {title}: tensors saved for the backward, {self.total() / gb:.2f} GB in {len(self.seen)} storages",
                 "", f"{'module (all layers)':60s} {'GB':>8s} {'tensors':>8s}"]
        lines += [f"{name[:60]:60s} {b / gb:8.3f} {n:8d}" for name, b, n in self.by_module()[:30]]
        lines += ["", "largest:"]
        lines += [f"  {b / gb:7.3f} GB  {dtype:9s} {str(list(shape)):28s} {where}" for where, b, shape, dtype
                  in self.largest()]
        return "\n".join(lines)


_SKIP_FRAME = ("torch/", "<frozen", "contextlib", "threading", "functools", "/bench/", "site-packages/torch")


def _frame_label(frames: list[dict[str, Any]]) -> str:
    """The innermost frame in model (transformers) or harness code: ``file:line func``."""
    for fr in frames:
        name = fr.get("filename", "")
        if ("transformers/" in name or "/harness/" in name) and not any(s in name for s in ("torch/",)):
            short = name.split("site-packages/")[-1]
            return f"{short}:{fr.get('line')} {fr.get('name')}"
    for fr in frames:
        name = fr.get("filename", "")
        if name.endswith(".py") and not any(s in name for s in _SKIP_FRAME):
            return f"{name.rsplit('/', 1)[-1]}:{fr.get('line')} {fr.get('name')}"
    return "<no python frame>"


def peak_blocks(snapshot: dict[str, Any], baseline_bytes: int = 0) -> tuple[int, list[tuple[str, int, int]]]:
    """Replay the allocator trace of ``torch.cuda.memory._snapshot()`` to its highest point.

    Returns (peak bytes above the blocks live when recording started, [(frame label, bytes, blocks)] of the
    allocations made during recording and live at that peak, largest first).
    """
    live: dict[int, tuple[int, str]] = {}
    current = peak = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for trace in snapshot.get("device_traces", []):
        for ev in trace:
            action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size", 0))
            if action == "alloc":
                live[addr] = (size, _frame_label(ev.get("frames", [])))
                current += size
                if current > peak:
                    peak, at_peak = current, dict(live)
            elif action in ("free_requested", "free_completed") and addr in live:  # the first of the two
                current -= live.pop(addr)[0]
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for size, label in at_peak.values():
        acc[label][0] += size
        acc[label][1] += 1
    return peak + baseline_bytes, sorted(((k, v[0], v[1]) for k, v in acc.items()), key=lambda r: -r[1])


def cuda_report(snapshot: dict[str, Any], resident_bytes: int, title: str) -> str:
    peak, rows = peak_blocks(snapshot)
    gb = 1e9
    lines = [f"## {title}: CUDA blocks allocated during the step and live at its peak: {peak / gb:.2f} GB "
             f"(on top of {resident_bytes / gb:.2f} GB resident before it)", "",
             f"{'first model/harness frame':90s} {'GB':>8s} {'blocks':>7s}"]
    lines += [f"{label[:90]:90s} {b / gb:8.3f} {n:7d}" for label, b, n in rows[:40]]
    return "\n".join(lines)
