"""`harness plan` against measured peaks: W of ``bench/grpo_step.py`` and the reduced MoE recipe on one H200.

    python bench/plan_validation.py     # prints planned vs measured per pair (results: bench/results/plan-validation-*)

The W recipe is built by ``grpo_step.build_cfg`` (the benchmark's own), planned on ``gpu-1x-h200``; the measured
figures are the committed ones (``bench/results/2026-12-02-nvidia-h200.json``, the reduced baseline's ``memory``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def main() -> int:
    import grpo_step

    from harness.config.recipe import resolve
    from harness.core.typed_recipe import Recipe
    from harness.plan.estimate import make_plan, plan_document
    from harness.plan.trace import trace_step

    args = grpo_step.parse_args([])
    wl = grpo_step.workload(args, torch.device("cuda"))
    cfg, _ = grpo_step.build_cfg(wl, torch.device("cuda"), args.micro, args.logprob_micro, args.gradient_checkpointing)
    spec = Recipe.model_validate(cfg)
    hw = resolve("qwen3_30b_a3b", "gpu-1x-h200", "reduced").hardware
    w = plan_document(spec, hw, trace_step(spec, world=1, prompt_len=args.prompt_len), recipe="W", scale="bench")
    w_measured = json.loads((ROOT / "bench/results/2026-12-02-nvidia-h200.json").read_text())["ours"]["peak_mem_gb"]
    red = make_plan(resolve("qwen3_30b_a3b", "gpu-1x-h200", "reduced"))
    red_measured = json.loads((ROOT / "baselines/qwen3_30b_a3b/gpu-1x-h200-reduced.json").read_text())["memory"]["value"]
    for name, doc, measured in (("W", w, w_measured), ("qwen3_30b_a3b reduced", red, red_measured)):
        planned = doc["per_rank_peak_bytes"] / 1e9
        print(f"{name:<24} planned {planned:6.2f} GB ({doc['peak_phase']})  measured {measured:6.2f} GB  "
              f"{(planned / measured - 1) * 100:+.1f} %")
        for phase, p in doc["phases"].items():
            print(f"    {phase:<10} {p['peak_bytes'] / 1e9:6.2f}  " +
                  "  ".join(f"{k} {v / 1e9:.2f}" for k, v in p["breakdown"].items()))
    print(f"cpu capability: {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
