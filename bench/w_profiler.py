"""Profiler helpers of ``bench/w_profile.py``: kernel classes by name, the device kernels of a torch.profiler
trace, their tables and class totals, and the named module ranges that charge each kernel to its module."""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType

# kernel classes by name, first match wins (the update's profile)
KERNEL_CLASSES: list[tuple[str, str]] = [
    ("optimizer (AdamW)", r"adam|multi_tensor_apply"),
    ("grouped GEMM (experts)", r"group"),
    ("attention", r"flash|fmha|attention|attn"),
    ("dense GEMM", r"gemm|nvjet|xmma|cutlass|cublas|sm90_|sm80_|wgmma"),
    ("compiled (Triton)", r"^triton"),
    ("sort / top-k / scan", r"sort|radix|histo|histc|scan|cumsum|topk|bitonic"),
    ("index / gather / scatter", r"index|gather|scatter|embedding"),
    ("reduction / softmax", r"reduce|norm|softmax"),
    ("copy / cast / cat / fill", r"direct_copy|bfloat16_copy|copy_kernel|CatArray|memcpy|memset|FillFunctor"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise"),
]


def kernel_class(name: str) -> str:
    for label, pat in KERNEL_CLASSES:
        if re.search(pat, name, re.IGNORECASE):
            return label
    return "other"


class Clock:
    """CUDA events on a GPU (no synchronisation until read), perf_counter elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def mark(self) -> Any:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a: Any, b: Any) -> float:
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b)
        return (b - a) * 1e3

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


# ----------------------------------------------------------------------------- profiler helpers
def start_profiler(device: torch.device) -> Any:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(activities=acts, record_shapes=False)
    prof.__enter__()
    return prof


ANNOTATION = re.compile(r"^(M:|phase:|replay$|decode_step$|Optimizer\.)|#\w+\.\w+$")


def device_kernels(prof: Any) -> list[Any]:
    """The profile's device-side kernels and copies (CUDA), without the ranges a profiler draws on the device
    timeline for CPU-side annotations (``record_function``, ``Optimizer.step#AdamW.step``); empty on CPU."""
    return [e for e in prof.events() if e.device_type == DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False) and not ANNOTATION.search(e.name)]


def kernel_table(kernels: list[Any], per: float, top: int = 45) -> tuple[str, list[dict[str, Any]]]:
    """Kernels grouped by name: count and device time, each divided by ``per`` (replays or 1)."""
    by: dict[str, list[float]] = collections.defaultdict(list)
    for k in kernels:
        by[k.name].append(k.time_range.end - k.time_range.start)
    rows = sorted(({"name": n, "count": len(d) / per, "us": sum(d) / per, "class": kernel_class(n)}
                   for n, d in by.items()), key=lambda r: -r["us"])
    total = sum(r["us"] for r in rows) or 1.0
    lines = [f"{'us':>10} {'share':>6} {'count':>8}  {'class':<34} kernel"]
    for r in rows[:top]:
        lines.append(f"{r['us']:10.1f} {100 * r['us'] / total:5.1f}% {r['count']:8.2f}  {r['class']:<34} "
                     f"{r['name'][:150]}")
    if len(rows) > top:
        rest = rows[top:]
        lines.append(f"{sum(r['us'] for r in rest):10.1f} {100 * sum(r['us'] for r in rest) / total:5.1f}% "
                     f"{sum(r['count'] for r in rest):8.2f}  ({len(rest)} more kernel names)")
    lines.append(f"{total:10.1f} 100.0% {sum(r['count'] for r in rows):8.2f}  total")
    return "\n".join(lines), rows


def class_totals(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        c = out.setdefault(r["class"], {"us": 0.0, "count": 0.0})
        c["us"] += r["us"]
        c["count"] += r["count"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["us"]))


def busy_us(kernels: list[Any]) -> float:
    """Union of the kernels' intervals (device busy time)."""
    spans = sorted((k.time_range.start, k.time_range.end) for k in kernels)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


# ----------------------------------------------------------------------------- module ranges
def module_label(name: str, module: torch.nn.Module) -> str | None:
    """The range name of a module of the model (layers aggregated), or None for modules not tracked."""
    leaf = name.rsplit(".", 1)[-1]
    if re.search(r"layers\.\d+$", name):
        return "layer"
    if leaf in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm", "self_attn", "input_layernorm",
                "post_attention_layernorm", "gate", "experts", "embed_tokens", "lm_head", "rotary_emb"):
        return leaf
    if leaf == "mlp":
        return "moe_block"
    if leaf == "norm" and "layers" not in name:
        return "final_norm"
    if name == "model":
        return "decoder"
    return None


class ModuleRanges:
    """A profiler range ``M:<label>`` around every tracked module's forward while installed."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.handles: list[Any] = []
        self.stack: list[Any] = []
        for name, mod in model.named_modules():
            label = "forward" if name == "" else module_label(name, mod)
            if label is None:
                continue
            self.handles.append(mod.register_forward_pre_hook(self._enter(label)))
            self.handles.append(mod.register_forward_hook(self._exit))

    def _enter(self, label: str) -> Callable[..., None]:
        def hook(_m: Any, _a: Any) -> None:
            rf = torch.profiler.record_function(f"M:{label}")
            rf.__enter__()
            self.stack.append(rf)
        return hook

    def _exit(self, _m: Any, _a: Any, _o: Any) -> None:
        self.stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def attribute(prof: Any, steps: int) -> dict[str, Any]:
    """Kernels of the eager decode steps charged to module ranges: exclusive (innermost range) and inclusive."""
    excl: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])  # label -> [us, count]
    incl: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    names_by_label: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    on_device = any(e.kernels for e in events)
    for e in events:
        if on_device:
            if not e.kernels:
                continue
            kernels = [(k.name, k.duration) for k in e.kernels]
        else:  # CPU: the leaf operators stand in for kernels (self CPU time), to check the attribution itself
            if e.cpu_children or e.name.startswith("M:") or e.name == "decode_step":
                continue
            kernels = [(e.name, e.self_cpu_time_total)]
        labels, p = [], e
        while p is not None:
            if p.name.startswith("M:") or p.name == "decode_step":
                labels.append(p.name[2:] if p.name.startswith("M:") else "step")
            p = p.cpu_parent
        if "step" not in labels:
            continue
        inner = labels[0] if labels[0] != "step" else "sampler / bookkeeping (outside the forward)"
        for name, dur in kernels:
            excl[inner][0] += dur
            excl[inner][1] += 1
            names_by_label[inner][name] += 1
            for lab in set(labels):
                incl[lab][0] += dur
                incl[lab][1] += 1
    norm = lambda d: {k: {"us": v[0] / steps, "kernels": v[1] / steps}  # noqa: E731
                      for k, v in sorted(d.items(), key=lambda kv: -kv[1][0])}
    return {"exclusive": norm(excl), "inclusive": norm(incl),
            "kernel_names": {k: dict(c.most_common(12)) for k, c in names_by_label.items()}}
