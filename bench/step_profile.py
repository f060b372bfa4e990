"""Around one GRPO step of bench/grpo_step.py: a torch profile with named phases, and the memory an update saves
for its backward (per module; on CUDA also the blocks live at its peak)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


def start_profile(device: torch.device) -> Any:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(activities=acts, record_shapes=False)
    prof.__enter__()
    return prof


@contextlib.contextmanager
def phase(prof: Any, name: str) -> Iterator[None]:
    """A named range in the profile (nothing when not profiling)."""
    if prof is None:
        yield
        return
    with torch.profiler.record_function(f"phase:{name}"):
        yield


def write_profile(prof: Any, out: Path, step: int) -> None:
    """The step's operator/kernel table (by self device time, then CPU time) and the phases' totals."""
    prof.__exit__(None, None, None)
    events = prof.key_averages()
    key = "self_device_time_total" if any(getattr(e, "self_device_time_total", 0) for e in events) \
        else "self_cpu_time_total"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"profile-ours-step{step}.txt"
    phases = [e for e in events if e.key.startswith("phase:")]
    head = "\n".join(f"{e.key}: cpu {e.cpu_time_total / 1e3:.1f} ms, "
                     f"device {getattr(e, 'device_time_total', 0) / 1e3:.1f} ms" for e in phases)
    path.write_text(head + "\n\n" + events.table(sort_by=key, row_limit=60) + "\n")
    print(f"[ours] profile of step {step}: {path}", flush=True)


@contextlib.contextmanager
def memory_accounting(model: torch.nn.Module, device: torch.device, out: Path, step: int, on: bool, micro: int
                      ) -> Iterator[None]:
    """Around one update (``on``): what its first micro-batch saves for the backward, per module, and on CUDA the
    blocks live at the update's peak; written to ``<out>/memory-ours-step<step>.txt``."""
    if not on:
        yield
        return
    from memory_account import SavedTensors, cuda_report

    saved = SavedTensors(model)
    forwards = [0]

    def first_only(module: torch.nn.Module, args: Any) -> None:  # account the first micro-batch's forward only
        forwards[0] += 1
        saved.active = forwards[0] == 1

    handle = model.get_input_embeddings().register_forward_pre_hook(first_only)  # one call per forward
    cuda = device.type == "cuda"
    resident = torch.cuda.memory_allocated(device) if cuda else 0
    if cuda:
        torch.cuda.memory._record_memory_history(max_entries=500_000)
    try:
        with saved.recording():
            yield
    finally:
        handle.remove()
        parts = [saved.report(f"step {step}, first update micro-batch ({micro} sequences)")]
        if cuda:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            parts.append(cuda_report(snap, resident, f"step {step}, the whole update"))
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"memory-ours-step{step}.txt"
        path.write_text("\n\n".join(parts) + "\n")
        print(f"[ours] memory of step {step}'s update: {path}", flush=True)
