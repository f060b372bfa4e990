"""Throughput floors of the multi-device suites, derived from a measured figure and the plan's step-time model.

    python bench/derive_floors.py [--write] [--json OUT]

For every smoke entry of a multi-device suite (``recipes/certification/<profile>.json`` whose numerics replay the
one-H200 reference ``baselines/<recipe>/gpu-1x-h200-smoke.json``):

- measured: ``F1`` = the reference's solo throughput (``perf/throughput`` on one H200, tokens/s per device) and
  ``T1`` = the median step time of the certified one-H200 run of the same entry
  (``certificates/gpu-1x-h200/runs/<entry>/run-1/metrics.jsonl``, ``timing_s/step``);
- the plan (``harness plan RECIPE --profile P --scale smoke``, fake ranks at the profile's world size ``N``) adds
  what one device does not pay: its interconnect terms (traced collective bytes over the profile's links) plus a
  latency of :data:`LATENCY_S` per collective (the bandwidth model has none; small messages are latency-bound);
- the step on ``N`` devices is taken as ``TN = T1 + C`` — no faster than one device although each rank holds
  ``1/N`` of the rows: a smoke model is bound by kernel launches, which do not shrink with the rows — so the
  predicted per-device figure is ``F1 · T1 / (N · TN)`` (``perf/throughput`` divides the step's tokens by the
  world size);
- another device model than the reference's scales it by ``D`` = the lower of its declared bf16 peak and memory
  bandwidth over the H200's (capped at 1: a faster device is not credited);
- the floor is :data:`SAFETY` of that prediction (a model, not a measurement), 3 significant digits, rounded down.

``--write`` puts the floors into the suites and says how in each entry's notes; ``--json`` keeps every input.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REFERENCE = "gpu-1x-h200"
LATENCY_S = 100e-6  # per collective: NCCL/HCCL small-message latency is ~10-50 us; twice the worst, rounded up
SAFETY = 0.5
NOTE_TAG = "Throughput floor derived"
SUITE_NOTE = ("Throughput floors are derived from the one-H200 reference's measured throughput and step time by the "
              "plan's step-time model at this profile's layout (each entry's notes give the inputs; "
              "bench/derive_floors.py); MFU is not gated at smoke scale. A replay run does not sample, so its "
              "training-side throughput only adds margin. The floors are replaced by 0.8 x a measured value after "
              "the first certified run.")


def _round_down(x: float, digits: int = 3) -> float:
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x)) - digits + 1
    return float(math.floor(x / 10 ** e) * 10 ** e)


def derive(suite_path: Path) -> list[dict[str, Any]]:
    from harness.config.recipe import resolve
    from harness.judge.baseline import load_baseline
    from harness.plan.estimate import make_plan

    doc = json.loads(suite_path.read_text())
    rows = []
    for entry in doc["entries"]:
        ref = entry["numerics"].get("reference_baseline") or ""
        if entry["scale"] != "smoke" or REFERENCE not in ref:
            continue
        base = load_baseline(ROOT / ref)
        solo = [r for r in base.throughput.references if r.solo]
        f1 = solo[0].value
        metrics = ROOT / "certificates" / REFERENCE / "runs" / entry["id"] / "run-1" / "metrics.jsonl"
        steps = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        t1 = statistics.median(s["timing_s/step"] for s in steps if s.get("step", 0) >= 2)
        res = resolve(entry["recipe"], doc["profile"], "smoke")
        ref_acc, acc = resolve(entry["recipe"], REFERENCE, "smoke").hardware.accelerator, res.hardware.accelerator
        device = min(1.0, acc.peak_bf16_tflops / ref_acc.peak_bf16_tflops,
                     acc.memory_bandwidth_gbps / ref_acc.memory_bandwidth_gbps)
        plan = make_plan(res)
        n = int(plan["world_size"])
        bandwidth = sum(p["terms_s"]["interconnect"] for p in plan["phases"].values())
        count = sum(c["count"] for c in plan["collectives"])
        tn = t1 + bandwidth + count * LATENCY_S
        predicted = device * f1 * t1 / (n * tn)
        rows.append({"suite": suite_path.name, "entry": entry["id"], "world": n, "reference_tok_s": f1,
                     "reference_step_s": t1, "plan_interconnect_s": bandwidth, "plan_collectives": count,
                     "predicted_step_s": tn, "device_ratio": device, "predicted_tok_s_per_device": predicted,
                     "floor": _round_down(SAFETY * predicted)})
    return rows


def note(row: dict[str, Any]) -> str:
    return (f"{NOTE_TAG} (bench/derive_floors.py): {SAFETY:g} x D x F1 x T1 / (N x (T1 + C)) with D = "
            f"{row['device_ratio']:.2f} (this device's declared bf16 peak and bandwidth over the H200's, at most 1), F1 = "
            f"{row['reference_tok_s']:,.0f} tok/s (the one-H200 reference's solo throughput), T1 = "
            f"{row['reference_step_s']:.3f} s (its certified run's median step), N = {row['world']}, C = "
            f"{row['plan_interconnect_s'] * 1e6:.0f} us of traced collective bytes over this profile's links + "
            f"{row['plan_collectives']} collectives x {LATENCY_S * 1e6:.0f} us (harness plan at smoke scale); a smoke "
            f"step is launch-bound, so it is taken as no faster on N devices.")


def write(suite_path: Path, rows: list[dict[str, Any]]) -> None:
    doc = json.loads(suite_path.read_text())
    by_id = {r["entry"]: r for r in rows}
    for entry in doc["entries"]:
        row = by_id.get(entry["id"])
        if row is None:
            continue
        entry["throughput_floor_tokens_per_s_per_device"] = row["floor"]
        kept = [s for s in entry["notes"].split(" | ") if not s.startswith(NOTE_TAG)]
        entry["notes"] = " | ".join(kept + [note(row)])
    doc["notes"] = [SUITE_NOTE if n.startswith("Throughput floors") else n for n in doc["notes"]]
    tmp = suite_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(suite_path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true", help="write the floors and their notes into the suites")
    p.add_argument("--json", type=Path, help="every input and result as JSON")
    args = p.parse_args()
    out = []
    for path in sorted((ROOT / "recipes" / "certification").glob("*.json")):
        if json.loads(path.read_text())["profile"] in (REFERENCE, "cpu"):
            continue
        rows = derive(path)
        out += rows
        if args.write:
            write(path, rows)
    for r in out:
        print(f"{r['suite']:<26} {r['entry']:<22} N={r['world']:<3} F1 {r['reference_tok_s']:>8,.0f}  T1 "
              f"{r['reference_step_s']:.3f} s  C {r['predicted_step_s'] - r['reference_step_s']:.4f} s  "
              f"predicted {r['predicted_tok_s_per_device']:>8,.0f}  floor {r['floor']:>8,.0f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
