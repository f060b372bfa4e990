"""The fused MoE routing (:mod:`harness.core.fused_moe`) against transformers' ``grouped_mm`` experts on one GPU.

One W-shaped experts module (hidden 2048, 128 experts top-8, MoE intermediate 768, bf16, seeded) at the decode
step's size (128 tokens) and an update micro-batch's (16,384 tokens):

- agreement: the routing's expert order equals a stable sort's; the output and the gradients of the input, the
  routing weights and the expert weights against transformers' forward and autograd (relative error);
- device time per call (CUDA events, median of repeats after warm-up): the forward without autograd (a CUDA
  graph of it for the decode size, as the rollout replays it), and forward + backward (update size);
- the routing alone: ``torch.sort`` + ``histc`` + ``cumsum`` (transformers') against ``route``.

Prints one JSON object and writes it to ``--out``/moe_routing.json. Usage (GPU): python bench/moe_routing.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.fused_moe import experts_forward, route  # noqa: E402

HIDDEN, EXPERTS, TOP_K, INTER = 2048, 128, 8, 768


def _experts() -> torch.nn.Module:
    import transformers

    cfg = transformers.Qwen3MoeConfig(hidden_size=HIDDEN, num_experts=EXPERTS, num_experts_per_tok=TOP_K,
                                      moe_intermediate_size=INTER, num_hidden_layers=1, vocab_size=1024)
    cfg._experts_implementation = "grouped_mm"  # noqa: SLF001
    torch.manual_seed(0)
    block = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(cfg)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return block.experts.to("cuda", torch.bfloat16)


def _inputs(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(tokens, HIDDEN, device="cuda", generator=g, dtype=torch.bfloat16)
    logits = torch.randn(tokens, EXPERTS, device="cuda", generator=g)
    w, idx = torch.softmax(logits, -1).topk(TOP_K, -1)
    return x, idx, (w / w.sum(-1, keepdim=True)).to(torch.bfloat16)


def _time(fn, repeats: int = 50, warmup: int = 5) -> float:
    """Median device time of ``fn`` in microseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def _graphed(fn):
    """``fn`` captured in a CUDA graph (as the rollout's decode step runs): returns the replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def main() -> None:
    from transformers.integrations.moe import grouped_mm_experts_forward

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    experts = _experts()
    ours = lambda *a: experts_forward(experts, *a)  # noqa: E731
    theirs = lambda *a: grouped_mm_experts_forward(experts, *a)  # noqa: E731
    result: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                 "shape": dict(hidden=HIDDEN, experts=EXPERTS, top_k=TOP_K, moe_inter=INTER)}
    for tokens in (128, 16384):
        x, idx, w = _inputs(tokens, tokens)
        slot, token, offsets = route(idx, EXPERTS)
        order = torch.sort(idx.reshape(-1), stable=True).indices
        want = torch.empty_like(order)
        want[order] = torch.arange(len(order), device="cuda")
        counts = torch.bincount(idx.reshape(-1), minlength=EXPERTS).cumsum(0).to(torch.int32)
        row: dict[str, object] = {"order_equal": bool(torch.equal(slot, want) and torch.equal(offsets, counts)
                                                     and torch.equal(token, order // TOP_K))}
        grads = {}
        for name, fn in (("ours", ours), ("theirs", theirs)):
            xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
            experts.zero_grad(set_to_none=True)
            out = fn(xx, idx, ww)
            (out.float() * torch.linspace(-1, 1, HIDDEN, device="cuda")).sum().backward()
            grads[name] = dict(out=out.detach(), x=xx.grad, w=ww.grad, down=experts.down_proj.grad.clone(),
                               up=experts.gate_up_proj.grad.clone())
        row["rel_err"] = {k: _rel(grads["ours"][k], grads["theirs"][k]) for k in grads["ours"]}
        with torch.no_grad():
            if tokens <= 1024:  # the decode step: graph replays
                row["forward_graph_us"] = {n: _time(_graphed(lambda f=f: f(x, idx, w))) for n, f in
                                           (("ours", ours), ("theirs", theirs))}
            row["forward_us"] = {n: _time(lambda f=f: f(x, idx, w)) for n, f in (("ours", ours), ("theirs", theirs))}
            routing = {"theirs": lambda: torch.cumsum(torch.histc(torch.sort(idx.reshape(-1))[0].int(), bins=EXPERTS,
                                                                  min=0, max=EXPERTS - 1), 0, dtype=torch.int32),
                       "ours": lambda: route(idx, EXPERTS)}
            row["routing_us"] = {n: _time(f) for n, f in routing.items()}
            if tokens <= 1024:
                row["routing_graph_us"] = {n: _time(_graphed(f)) for n, f in routing.items()}
        if tokens > 1024:
            xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()

            def fwd_bwd(f):
                experts.zero_grad(set_to_none=True)
                f(xx, idx, ww).float().sum().backward()
            row["forward_backward_us"] = {n: _time(lambda f=f: fwd_bwd(f), repeats=20) for n, f in
                                          (("ours", ours), ("theirs", theirs))}
        result[f"tokens_{tokens}"] = row
        print(tokens, json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "moe_routing.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
