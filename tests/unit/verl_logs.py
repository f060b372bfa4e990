"""verl-format logs for the tests, made without training: a run's per-step metrics rewritten as verl's FileLogger
writes them (one ``{"step": N, "data": {metric: value}}`` line per step), from a run's ``metrics.jsonl`` or from
one seed of a committed baseline (which holds every seed's per-step values)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "qwen3_vl_30b" / "cpu-smoke.json"
VAL = "val-core/synthetic/color/reward/mean"


def verl_name(name: str) -> str:
    """The harness's name as verl writes it (validation carries verl's @N sample count)."""
    return name + "@1" if name.startswith("val-core/") else name


def write_verl_log(rows: dict[int, dict[str, float]], path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for step in sorted(rows):
            fh.write(json.dumps({"step": step, "data": {verl_name(k): v for k, v in rows[step].items()}}) + "\n")
    return path


def baseline_rows(seed_index: int, baseline: dict[str, Any] | None = None) -> dict[int, dict[str, float]]:
    """Seed ``seed_index`` of the baseline (0: the primary, k: the k-th noise seed) as step -> metrics."""
    doc = baseline or json.loads(BASELINE.read_text(encoding="utf-8"))
    rows: dict[int, dict[str, float]] = {}
    for name, m in doc["metrics"].items():
        values = m["values"] if seed_index == 0 else m["noise_values"][seed_index - 1]
        for k, v in zip(m["steps"], values):
            if v is not None:
                rows.setdefault(k, {})[name] = v
    return rows


def run_rows(run_dir: Path) -> dict[int, dict[str, float]]:
    """A harness run's metrics.jsonl as step -> metrics."""
    rows = {}
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows[row.pop("step")] = row
    return rows
