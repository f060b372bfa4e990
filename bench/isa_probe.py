"""Which CPU ops give the same bits on two machines: a SHA-256 per op over fixed inputs.

Inputs are built from integers (no RNG whose vector path could differ between ISAs), the numerics
pin is applied first as the harness does, and each op's output (and gradient, where the training
loop takes one) is hashed. Run it on two machines and diff the JSON:

    python bench/isa_probe.py > probe-a.json          # pinned (the default)
    HARNESS_CPU_ISA=native python bench/isa_probe.py > probe-native-a.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import numerics  # noqa: E402

numerics.apply_env()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

numerics.activate()
torch.use_deterministic_algorithms(True)


def inp(*shape: int, salt: int = 0) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64) * 2654435761 + salt * 40503
    return (((i % 2000003) - 1000001).to(torch.float32) / 1e6).reshape(shape)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def grad_of(fn, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    xs = tuple(x.clone().requires_grad_(True) for x in xs)
    out = fn(*xs)
    out.backward(torch.ones_like(out) if out.dim() else None)
    return (out, *[x.grad for x in xs])


def main() -> None:
    a, b = inp(37, 129), inp(129, 65, salt=1)
    x = inp(8, 64, 128, salt=2)
    q, k, v = (inp(8, 4, 40, 32, salt=s) for s in (3, 4, 5))
    ops = {
        "mm 37x129x65": lambda: torch.mm(a, b),
        "mm 512x128x512": lambda: inp(512, 128, salt=6) @ inp(128, 512, salt=7),
        "linear 8x64x128->256": lambda: F.linear(x, inp(256, 128, salt=8)),
        "bmm": lambda: torch.bmm(inp(16, 40, 32, salt=9), inp(16, 32, 40, salt=10)),
        "softmax": lambda: torch.softmax(x * 7, -1),
        "log_softmax": lambda: torch.log_softmax(x * 7, -1),
        "logsumexp": lambda: torch.logsumexp(x * 7, -1),
        "exp": lambda: torch.exp(x * 5),
        "log": lambda: torch.log(x.abs() + 1e-3),
        "silu": lambda: F.silu(x * 4),
        "gelu_tanh": lambda: F.gelu(x * 4, approximate="tanh"),
        "sum last": lambda: x.sum(-1),
        "sum all": lambda: x.sum(),
        "mean(x^2) rsqrt (rmsnorm)": lambda: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6),
        "layer_norm": lambda: F.layer_norm(x, (128,)),
        "sdpa causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "sdpa gqa": lambda: F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True),
        "conv3d (patch embed)": lambda: F.conv3d(inp(4, 3, 2, 16, 16, salt=11), inp(32, 3, 2, 8, 8, salt=12),
                                                 stride=(2, 8, 8)),
        "topk": lambda: torch.topk(x * 3, 2, -1).values,
        "sqrt": lambda: torch.sqrt(x.abs()),
        "rsqrt": lambda: torch.rsqrt(x.abs() + 1e-3),
        "div": lambda: x / (x.abs() + 0.37),
        "sigmoid": lambda: torch.sigmoid(x * 4),
        "tanh": lambda: torch.tanh(x * 4),
        "pow 2.5": lambda: torch.pow(x.abs(), 2.5),
        "cos/sin (rope)": lambda: torch.cos(x * 30) + torch.sin(x * 30),
        "lerp_ 0.1": lambda: x.clone().lerp_(x * 0.5 + 0.25, 0.1),
        "mul_ add_": lambda: x.clone().mul_(0.999).add_(1e-8),
        "addcmul_": lambda: x.clone().addcmul_(x, x, value=0.001),
        "addcdiv_": lambda: x.clone().addcdiv_(x * 0.1, x.abs() + 1e-3, value=-0.01),
        "clamp": lambda: torch.clamp(x * 30, -10, 10),
        "cumsum": lambda: torch.cumsum(x, -1),
    }
    grads = {
        "grad linear": lambda: grad_of(lambda w: F.linear(x, w).square().sum(), inp(256, 128, salt=8))[1],
        "grad log_softmax gather": lambda: grad_of(
            lambda z: torch.log_softmax(z, -1)[..., 3].sum(), x * 7)[1],
        "grad embedding": lambda: grad_of(
            lambda w: F.embedding(torch.arange(640) % 500, w).square().sum(), inp(500, 64, salt=13))[1],
        "grad sdpa": lambda: grad_of(lambda qq: F.scaled_dot_product_attention(qq, k, v, is_causal=True).sum(), q)[1],
    }

    def adamw_variant(**kw: bool) -> Any:
        def run() -> torch.Tensor:
            p = torch.nn.Parameter(inp(300, 70, salt=14))
            opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
            for s in range(3):
                p.grad = inp(300, 70, salt=20 + s)
                opt.step()
            return p.detach()
        return run

    variants = {"adamw 3 steps": adamw_variant(foreach=False), "adamw foreach 3 steps": adamw_variant(foreach=True),
                "adamw fused 3 steps": adamw_variant(fused=True)}
    # GEMM shapes: squares (a 256 x 256 product is where oneMKL's AVX2 branch first differed between vendors) and
    # the smoke models' products (hidden 128, vocabulary 512, experts 64, vision 32), each with the transposed
    # operands its backward multiplies
    gemms: dict[str, Any] = {}
    for m, kk, n in [(64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (96, 200, 300),
                    (1024, 128, 512), (512, 128, 256), (2048, 128, 64), (1024, 64, 128), (640, 32, 96),
                    (4096, 128, 128), (300, 1024, 128)]:
        left, right = inp(m, kk, salt=m + kk), inp(kk, n, salt=kk + n)
        gemms[f"mm {m}x{kk}x{n}"] = lambda a_=left, b_=right: a_ @ b_
        gemms[f"mm {m}x{kk}x{n} A^T"] = lambda a_=left, b_=right: a_.t().contiguous().t() @ b_
        gemms[f"mm {m}x{kk}x{n} B^T"] = lambda a_=left, b_=right: a_ @ b_.t().contiguous().t()
        gemms[f"mm {kk}x{m}x{n} (A^T B)"] = lambda a_=left, c_=inp(m, n, salt=m + n): a_.t() @ c_
    out = {name: digest(fn()) for name, fn in {**ops, **gemms, **grads, **variants}.items()}
    # the host-side scalars of the AdamW step (Python floats: libm pow)
    out["adamw scalars"] = hashlib.sha256(" ".join(
        f"{(1 - 0.9 ** k).hex()} {(1 - 0.999 ** k).hex()} {((1 - 0.999 ** k) ** 0.5).hex()}"
        for k in (1.0, 2.0, 3.0, 150.0)).encode()).hexdigest()[:16]
    rec = numerics.record()
    print(json.dumps({"torch": torch.__version__, "isa_class": rec["isa_class"], "level": rec["level"],
                      "cpu_capability": rec["cpu_capability"], "threads": rec["threads"], "ops": out}, indent=1))


if __name__ == "__main__":
    main()
