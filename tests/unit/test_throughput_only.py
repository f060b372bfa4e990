"""``record-baseline --throughput-only``: this machine's throughput reference replaces the one of the same device model,
thread count and kind of host speed (only with --force), the rest of the baseline file untouched, and it keeps the
per-step scale when its runs sampled before every step and their throughput followed the samples. A host of another speed
(a slow H200 host beside the fast one that recorded the baseline) adds its own reference, and a run is judged against
the one whose calibration is nearest its own. The seeded runs are the committed certified
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


REF_SPEED = load_json_strict(BASELINE)["throughput"]["references"][0]["speed_index"]  # 1,871: the recording host


def _fast_host_only(out: Path) -> Path:
    """The committed baseline as the fast host left it: its first reference only (the committed file also holds a
    slow host's, recorded on 2026-12-06, which these tests add or replace themselves)."""
    doc = load_json_strict(BASELINE)
    doc["throughput"]["references"] = doc["throughput"]["references"][:1]
    out.write_text(json.dumps(doc))
    return out


def _runs(tmp: Path, per_step: bool, speed: float = REF_SPEED) -> list[Path]:
    """Copies of the certified runs, their hosts' calibration set to ``speed``; with ``per_step`` each step's
    throughput follows a wandering host speed and carries that speed's sample, as an accelerator run records it."""
    out = []
    for k, src in enumerate(sorted(RUNS.glob("run-*"))):
        dst = tmp / f"seed-{k}"
        shutil.copytree(src, dst)
        manifest = load_json_strict(dst / "manifest.json")
        cal = manifest["calibration"]
        cal["samples"] = [x * speed / cal["speed_index"] for x in cal["samples"]]
        cal["speed_index"] = speed
        (dst / "manifest.json").write_text(json.dumps(manifest))
        if per_step:
            rng, level = random.Random(k), (0.8, 1.1)[k % 2]  # one run on a slower stretch of the host
            rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
            for row in rows:
                if "perf/throughput" in row:
                    host = level * rng.uniform(0.8, 1.0)
                    row["perf/throughput"] = 20_000.0 * host
                    row[SPEED_METRIC] = speed * host * rng.uniform(0.99, 1.01)
            (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out.append(dst)
    return out


@pytest.mark.parametrize("per_step", [False, True])
def test_the_reference_is_replaced_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    per_step: bool) -> None:
    out = _fast_host_only(tmp_path / "gpu-1x-h200-smoke.json")
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


def test_a_host_of_another_speed_adds_its_own_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow host (calibration 0.53x the recording host's, as measured on an H200 host on 2026-12-05) adds its
    reference beside the fast host's, without --force; each run is then judged against the nearest of the two."""
    from harness.judge.baseline import load_baseline
    from harness.judge.tiers import throughput_reference
    from harness.records.base import read
    from harness.records.run import Manifest
    from harness.run.environment import summary

    out = _fast_host_only(tmp_path / "gpu-1x-h200-smoke.json")
    runs = _runs(tmp_path / "runs", True, speed=0.53 * REF_SPEED)
    monkeypatch.setattr(BR, "_seed_runs", lambda *a, **k: runs)
    args = dict(runs=len(runs), steps=None, out=out, runs_dir=tmp_path / "runs", progress=False, log=lambda s: None)
    slow = BR.record_throughput("qwen3_vl_30b", "gpu-1x-h200", "smoke", **args)
    fast = load_json_strict(BASELINE)["throughput"]["references"][0]
    stored = load_json_strict(out)["throughput"]["references"]
    assert [r["speed_index"] for r in stored] == [fast["speed_index"], slow.speed_index]
    with pytest.raises(HarnessError, match="on a host of this speed"):  # the slow host's own: only with --force
        BR.record_throughput("qwen3_vl_30b", "gpu-1x-h200", "smoke", **args)
    doc, env = load_baseline(out), summary(read(runs[0] / "manifest.json", Manifest, "manifest"))
    for speed, want in ((0.5 * REF_SPEED, slow.speed_index), (0.9 * REF_SPEED, fast["speed_index"]),
                        (2.0 * REF_SPEED, fast["speed_index"])):
        ref, why = throughput_reference(doc, env, speed)
        assert ref is not None and ref.speed_index == want, (speed, why)
