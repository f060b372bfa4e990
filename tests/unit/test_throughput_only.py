"""``record-baseline --throughput-only``: this machine's throughput reference replaces the one of the same device model
and thread count (only with --force), the rest of the baseline file untouched, and it keeps the per-step scale when
its runs sampled before every step and that narrowed their spread. The seeded runs are the committed certified
one-H200 runs of the recipe (their per-step samples made up here: the launch-bound case, a host whose speed moves)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.judge import baseline_record as BR
from harness.records.run import SPEED_METRIC

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "certificates" / "gpu-1x-h200" / "runs" / "qwen3-vl-30b-smoke"
BASELINE = ROOT / "baselines" / "qwen3_vl_30b" / "gpu-1x-h200-smoke.json"


def _runs(tmp: Path, per_step: bool) -> list[Path]:
    """Copies of the certified runs; with ``per_step`` each step's throughput follows a wandering host speed and
    carries that speed's sample, as an accelerator run records it."""
    out = []
    for k, src in enumerate(sorted(RUNS.glob("run-*"))):
        dst = tmp / f"seed-{k}"
        shutil.copytree(src, dst)
        if per_step:
            rng, level = random.Random(k), (0.8, 1.1)[k % 2]  # one run on a slower stretch of the host
            rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
            for row in rows:
                if "perf/throughput" in row:
                    host = level * rng.uniform(0.8, 1.0)
                    row["perf/throughput"] = 20_000.0 * host
                    row[SPEED_METRIC] = 1500.0 * host * rng.uniform(0.99, 1.01)
            (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out.append(dst)
    return out


@pytest.mark.parametrize("per_step", [False, True])
def test_the_reference_is_replaced_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    per_step: bool) -> None:
    out = tmp_path / "gpu-1x-h200-smoke.json"
    shutil.copy(BASELINE, out)
    runs = _runs(tmp_path / "runs", per_step)
    monkeypatch.setattr(BR, "_seed_runs", lambda *a, **k: runs)
    args = dict(runs=len(runs), steps=None, out=out, runs_dir=tmp_path / "runs", progress=False, log=lambda s: None)
    with pytest.raises(HarnessError, match="already has a throughput reference for NVIDIA H200"):
        BR.record_throughput("qwen3_vl_30b", "gpu-1x-h200", "smoke", **args)
    ref = BR.record_throughput("qwen3_vl_30b", "gpu-1x-h200", "smoke", force=True, **args)
    before, after = load_json_strict(BASELINE), load_json_strict(out)
    assert {k: v for k, v in after.items() if k != "throughput"} == {k: v for k, v in before.items() if k != "throughput"}
    (stored,) = after["throughput"]["references"]
    assert stored["device_model"] == "NVIDIA H200" and stored["value"] == ref.value != before["throughput"][
        "references"][0]["value"]
    assert len(stored["seed_values"]) == len(runs)
    if per_step:  # each step at the reference's speed: the made-up host's wander is gone
        assert stored["per_step"]["relative_spread"] < stored["relative_spread"] / 3
    else:  # the certified runs sampled every 10 steps: no per-step scale
        assert "per_step" not in stored
