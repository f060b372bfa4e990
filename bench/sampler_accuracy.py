"""The fused sampler's draws against the float64 inverse CDF, beside the reference sampler's in float32.

Near-uniform logits over W's vocabulary (a random model's: each token ~7e-6 of the mass) are where a running
sum's rounding moves token boundaries most. For ``--batches`` × ``--rows`` rows of N(0, std²) bf16 logits and
one uniform each, counts the rows whose token differs from the float64 draw (the same function in float64):
``reference_float32`` (:func:`harness.core.rollout.sample_from_logits` on float32 logits, as the graph
engine runs it) and ``fused`` (:func:`harness.core.fused_sampler.fused_sample`). Prints one JSON line per std.

    python bench/sampler_accuracy.py                 # CUDA
    TRITON_INTERPRET=1 python bench/sampler_accuracy.py --device cpu --rows 32 --batches 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.fused_sampler import fused_sample  # noqa: E402
from harness.core.rollout import sample_from_logits  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--std", type=float, nargs="+", default=[1.0, 3.0])
    args = ap.parse_args()
    dev = torch.device(args.device)
    plain = dict(temperature=1.0, top_k=-1, top_p=1.0)
    for std in args.std:
        g = torch.Generator(device=dev).manual_seed(int(std * 1000))
        diff = {"reference_float32": 0, "fused": 0}
        for _ in range(args.batches):
            x = (torch.randn(args.rows, args.vocab, generator=g, device=dev) * std).to(torch.bfloat16)
            bias = torch.zeros(args.vocab, device=dev)
            u = torch.rand(args.rows, generator=g, device=dev)
            t64, _ = sample_from_logits(x.double(), uniforms=u.double(), **plain)
            t32, _ = sample_from_logits(x.float(), uniforms=u, **plain)
            tf, _ = fused_sample(x, bias, u, 1.0)
            diff["reference_float32"] += int((t32 != t64).sum())
            diff["fused"] += int((tf != t64).sum())
        print(json.dumps({"device": str(dev), "vocab": args.vocab, "std": std, "rows": args.rows * args.batches,
                          "rows_differing_from_float64": diff}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
