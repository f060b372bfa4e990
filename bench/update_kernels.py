"""Two of the update's kernels on one GPU, old against new: the RMSNorm (transformers' module, the lean norm, the
Triton training pair) and the output head's chunks (checkpointed and compiled, one chunk at a time, against
:class:`harness.core.fused_head.ChunkedHead`).

Norms. For W's norm shapes in one update micro-batch (32 sequences × 512 tokens, bf16): the decoder's hidden rows
(16,384 × 2048: the input and post-attention norms and the final norm), the q norm's per-head rows (16,384 × 32
heads × 128) and the k norm's (× 4 KV heads):

- agreement: the output, the input's and the weight's gradient of each implementation against the module's formula
  in float64 under autograd (the largest error relative to the largest reference value);
- device time of forward + backward per call (CUDA events, median of repeats after warm-up), and the bytes that
  the pair must move at least (read x, write y; read x and the gradient, write dx) as a bandwidth.

Head. One W micro-batch's response positions (32 × 256 = 8,192 rows of hidden 2048, a 151,936-token bf16 head,
chunks of ``update.LOGIT_CHUNK_BYTES``), log-probs and entropies with a loss on both: device time of forward +
backward, the peak memory above the inputs, and the gradients' agreement between the two (largest error relative
to the largest value).

Prints one JSON object and writes it to ``--out``/update_kernels.json.
Usage (GPU): python bench/update_kernels.py --out DIR   (CPU check of the script, Triton's interpreter: --tiny)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # moe_routing's timer

SHAPES = {"hidden": (16384, 2048), "q_norm": (16384, 32, 128), "k_norm": (16384, 4, 128)}
TINY = {"hidden": (64, 256), "q_norm": (64, 4, 32), "k_norm": (64, 1, 32)}


def _module(width: int, device: str) -> torch.nn.Module:
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeRMSNorm

    m = Qwen3MoeRMSNorm(width, eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(0.5, 1.5, width))
    return m.to(device, torch.bfloat16)


def _implementations(m: torch.nn.Module) -> dict:
    from harness.core.fused_norm import TrainRMSNorm
    from harness.core.lean_norm import LeanRMSNorm

    return {"module": lambda x: type(m).forward(m, x),
            "lean": lambda x: LeanRMSNorm.apply(x, m.weight, m.variance_epsilon),
            "train": lambda x: TrainRMSNorm.apply(x, m.weight, m.variance_epsilon)}


def _reference(x: torch.Tensor, w: torch.Tensor, up: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    x64 = x.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True)
    y = w64 * (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps))
    (y * up.double()).sum().backward()
    return y.detach(), x64.grad, w64.grad


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30))


def _time_us(fn, device: str, repeats: int, warmup: int = 3) -> float:
    """Median time of ``fn`` in microseconds: device time on CUDA (``moe_routing``'s events), else wall time."""
    if device == "cuda":
        from moe_routing import _time

        return _time(fn, repeats, warmup)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def measure(name: str, shape: tuple[int, ...], device: str, repeats: int) -> dict:
    m = _module(shape[-1], device)
    gen = torch.Generator(device=device).manual_seed(1)
    x = (torch.randn(shape, generator=gen, device=device) * 3).to(torch.bfloat16)
    up = torch.randn(shape, generator=gen, device=device).to(torch.bfloat16)
    ref_y, ref_dx, ref_dw = _reference(x, m.weight, up, m.variance_epsilon)
    row: dict = {"shape": list(shape), "elements": x.numel()}
    for impl, fn in _implementations(m).items():
        xi = x.clone().requires_grad_(True)
        m.weight.grad = None
        y = fn(xi)
        y.backward(up)
        row[impl] = {"rel_err_y": _rel(y.detach(), ref_y), "rel_err_dx": _rel(xi.grad, ref_dx),
                     "rel_err_dw": _rel(m.weight.grad, ref_dw)}

        def step(fn=fn, xi=xi) -> None:
            xi.grad = m.weight.grad = None  # no accumulation into earlier gradients in the timed work
            fn(xi).backward(up)

        us = _time_us(step, device, repeats)
        row[impl]["fwd_bwd_us"] = us
        row[impl]["min_bytes_gb_s"] = 5 * x.numel() * 2 / (us * 1e-6) / 1e9  # x, y; x, dy, dx (bf16)
        print(f"[norm] {name} {impl}: {row[impl]}", flush=True)
    return row


def head(device: str, tiny: bool, repeats: int) -> dict:
    from harness.core import algos, fused_head, update
    from harness.lazyimport import loaded

    rows, hidden, vocab = (40, 64, 1000) if tiny else (8192, 2048, 151936)
    chunk = max(1, (4096 if tiny else update.LOGIT_CHUNK_BYTES) // (vocab * 4))
    gen = torch.Generator(device=device).manual_seed(2)
    h = torch.randn(rows, hidden, generator=gen, device=device).to(torch.bfloat16)
    w = (torch.randn(vocab, hidden, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    labels = torch.randint(0, vocab, (rows,), generator=gen, device=device)
    bias = torch.zeros(vocab, device=device)
    up = torch.randn(2, rows, generator=gen, device=device)
    compiled = not tiny
    # As in a training step, where the advantages have imported algos' torch before any head chunk is traced. Until
    # 2026-12-07 this benchmark traced first: Dynamo broke the checkpoint's graph at that import.
    loaded(algos.torch)
    old_chunk = torch.compile(update._checkpointed_chunk) if compiled else update._checkpointed_chunk  # noqa: SLF001

    def old(hi, wi):
        return fused_head.over_chunks(old_chunk, hi, wi, labels, bias, 1.0, chunk, True)

    def new(hi, wi):
        return fused_head.ChunkedHead.apply(hi, wi, labels, bias, 1.0, chunk, True, compiled)

    res: dict = {"rows": rows, "hidden": hidden, "vocab": vocab, "chunk_rows": chunk}
    grads = {}
    for name, fn in (("checkpointed", old), ("chunked_head", new)):
        hi, wi = h.clone().requires_grad_(True), w.clone().requires_grad_(True)

        def step(fn=fn, hi=hi, wi=wi) -> None:
            hi.grad = wi.grad = None
            logp, ent = fn(hi, wi)
            ((logp * up[0]).sum() + (ent * up[1]).sum()).backward()

        step()
        grads[name] = (hi.grad.clone(), wi.grad.clone())
        hi.grad = wi.grad = None
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if device == "cuda" else 0
        us = _time_us(step, device, repeats)
        peak = (torch.cuda.max_memory_allocated() - base) / 1e9 if device == "cuda" else None
        res[name] = {"fwd_bwd_us": us, "peak_above_inputs_gb": peak}
        print(f"[head] {name}: {res[name]}", flush=True)
    (gh0, gw0), (gh1, gw1) = grads["checkpointed"], grads["chunked_head"]
    res["rel_diff_dh"] = _rel(gh1, gh0.double())
    res["rel_diff_dw"] = _rel(gw1, gw0.double())
    print(f"[head] gradients, chunked head against checkpointed: dh {res['rel_diff_dh']:.2e}, "
          f"dw {res['rel_diff_dw']:.2e}", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tiny", action="store_true", help="small shapes on the CPU (Triton's interpreter)")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)
    if args.tiny:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = "cpu" if args.tiny else "cuda"
    res: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)",
                 "torch": torch.__version__, "shapes": {}}
    for name, shape in (TINY if args.tiny else SHAPES).items():
        res["shapes"][name] = measure(name, shape, device, 2 if args.tiny else args.repeats)
    res["head"] = head(device, args.tiny, 2 if args.tiny else 10)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "update_kernels.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
