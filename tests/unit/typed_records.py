"""Partial records built by the unit tests, completed with neutral values and read into their models (the judge
reads records as models, :mod:`harness.records`)."""

from __future__ import annotations

import copy
from typing import Any

from harness.judge.baseline import DEFAULT_POLICY
from harness.records.base import dump
from harness.records.baseline import Baseline, Environment

SOFTWARE = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0", "tokenizers": "0.23.3",
            "numpy": "2.4.6", "cuda": None, "torch_npu": None, "threads": 2, "cpu_capability": "AVX2", "cudnn": None}
MACHINE = {"arch": "x86_64", "device_type": "cpu", "device_model": "Test CPU", "device_count": 1, "cpu_model": "",
           "driver": None, "runtime": None}
ENV = {"deterministic": True, "software": SOFTWARE, "machine": MACHINE, "numerics": None,
       "runtime": {"kind": "local", "world_size": 1, "image_id": None, "lock_sha256": None},
       "harness": {"version": "0", "revision": None, "dirty": None}}
SHA = "0" * 64
BASELINE = {"schema_version": 2, "recipe": {"name": "test", "hash": SHA, "config_hash": SHA}, "profile": "cpu",
            "scale": "smoke", "architecture": {}, "dtype": "float32", "steps": 1,
            "created_utc": "2026-01-01T00:00:00Z", "command": "test", "primary_seed": 0, "noise_seeds": [],
            "environment": None, "memory": {"value": 0.0, "seed_values": [], "relative_spread": 0.0},
            "throughput": {"references": []}, "runs": []}


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in patch.items()}}
    return copy.deepcopy(patch)


def env(partial: dict[str, Any] | None) -> Environment | None:
    return None if partial is None else Environment.model_validate(_merge(ENV, partial))


def baseline(partial: dict[str, Any]) -> Baseline:
    doc = _merge({**BASELINE, "policy": dump(DEFAULT_POLICY)}, partial)
    if isinstance(doc.get("environment"), dict):
        doc["environment"] = _merge(ENV, doc["environment"])
    return Baseline.model_validate(doc)
