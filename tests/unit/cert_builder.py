"""A certificate directory built the way `harness certify cpu` builds one, without training.

The runs are two small synthetic run directories of the cpu suite's entry (a full manifest with fixed machine,
software and runtime blocks, which the system block is derived from, 8 steps of metrics, an mlperf.log); the
checks are the harness's own (:func:`harness.judge.certify.entry_checks`: the numerics check is refused — the
manifest names another version of the recipe — so the result is FAIL, which a verifier re-derives). As in
certify, the runs' training state is dropped (:func:`harness.commands.certify.drop_training_state`) and every
file beside the runs and ``certificate.json`` itself are written by
:func:`harness.commands.certify.write_certificate`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from harness import __version__
from harness.commands.certify import drop_training_state, write_certificate
from harness.config.profiles import load_profile
from harness.config.typed_files import Profile
from harness.judge import certify as C
from harness.paths import PROFILES_DIR, ROOT
from harness.records.base import dump, parse, read
from harness.records.certificate import Certificate
from harness.records.run import Manifest

UTC = "2026-12-03T00:00:00Z"
MACHINE = {"device_type": "cpu", "device_count": 1, "device_model": "x86_64", "device_memory_gb": 8.0,
           "driver": None, "runtime": None, "cpu_cores": 2, "host_memory_gb": 23.4, "hostname": "builder"}
SOFTWARE = {"python": "3.11.2", "torch": "2.13.0", "transformers": "5.0.0", "tokenizers": "0.22.0",
            "numpy": "2.3.0", "cuda": None, "torch_npu": None, "threads": 2, "cpu_capability": "AVX2", "cudnn": None}
LAUNCH = {"kind": "local", "world_size": 1, "nnodes": 1, "image_id": None, "lock_sha256": None}


@functools.lru_cache(maxsize=None)
def _base(recipe: str, profile: str, steps: int) -> str:
    from harness.config.recipe import resolve
    from harness.run.runner import base_manifest

    return json.dumps(base_manifest(resolve(recipe, profile, "smoke"), steps=steps, runtime="local", world=1,
                                    fault={}))


def manifest(recipe: str = "qwen3_vl_30b", *, profile: str = "cpu", steps: int = 8, deterministic: bool = True,
             machine: dict[str, Any] | None = None, runtime: dict[str, Any] | None = None,
             status: str = "complete") -> dict[str, Any]:
    """A full run manifest (valid under its schema) of ``recipe`` at smoke scale, ``steps`` done, with the fixed
    machine, software and launch blocks above (``machine`` / ``runtime`` patch them); its recipe hash is not the
    recipe's, so compare refuses to judge it."""
    m: dict[str, Any] = {"schema_version": 1, "status": status, "created_utc": UTC,
                         "finished_utc": None if status == "running" else UTC, "error": None,
                         **json.loads(_base(recipe, profile, steps))}
    m.update(deterministic=deterministic, software=dict(SOFTWARE), machine={**MACHINE, **(machine or {})},
             runtime={**LAUNCH, **(runtime or {})})
    m["recipe"]["hash"] = "0" * 64
    m["steps"]["completed"] = 0 if status == "running" else steps
    return dump(Manifest.model_validate(m))


def _run(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(manifest()))
    rows = [{"step": k, "actor/pg_loss": 0.1 * k, "perf/throughput": 1000.0 + k, "perf/mfu": 0.02,
             "perf/max_memory_allocated_gb": 0.5, "timing_s/step": 1.0} for k in range(1, 9)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "mlperf.log").write_text(':::MLLOG {"key": "run_start"}\n')
    (d / "rollouts").mkdir()  # what a local run keeps for recording a baseline: not evidence, certify drops it
    (d / "rollouts" / "initial.npz").write_bytes(b"PK")


def build(out: Path, signer: Any = None) -> dict[str, Any]:
    """Write a certificate of the cpu suite into ``out`` (new), signed by ``signer``; return its document."""
    suite_file, suite = C.load_suite("cpu")
    profile = Profile.model_validate(load_profile("cpu"))
    entry = suite.entries[0]
    dirs = [out / "runs" / entry.id / f"run-{k}" for k in (1, 2)]
    for d in dirs:
        _run(d)
    runs = [C.rel(d, out) for d in dirs]
    drop_training_state(dirs)
    baseline = ROOT / entry.numerics.reference_baseline
    checks = C.entry_checks(entry, profile, baseline, dirs, runs, write=False)
    system = C.derive_system(profile, [read(d / "manifest.json", Manifest, "manifest") for d in dirs], None)
    summary, result = C.summarize(checks)
    profile_file = PROFILES_DIR / "cpu.json"
    doc: dict[str, Any] = {
        "schema_version": 1, "created_utc": UTC, "command": "harness certify cpu",
        "harness": {"version": __version__, "revision": None, "dirty": None},
        "profile": {"name": "cpu", "path": C.rel(profile_file, ROOT), "description": profile.description},
        "suite": {"path": C.rel(suite_file, ROOT), "notes": list(suite.notes)},
        "system": dump(system),
        "entries": [{"id": entry.id, "recipe": entry.recipe, "scale": entry.scale, "steps": 8,
                     "reference_baseline": entry.numerics.reference_baseline, "tier": entry.numerics.tier,
                     "runs": runs}],
        "checks": [dump(c) for c in checks],
        "inputs": C.input_digests(ROOT, suite_file, profile_file, [ROOT / "recipes" / f"{entry.recipe}.json"],
                                  [baseline], None),
        "results": C.result_digests(out, [(entry.id, dirs)]), "summary": dump(summary), "result": result,
    }
    cert = parse(doc, Certificate, "certificate", str(out / C.CERT_FILE))
    write_certificate(out, cert, signer)
    return dump(cert)
