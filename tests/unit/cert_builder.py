"""A certificate directory built the way `harness certify cpu` builds one, without training.

The runs are two small synthetic run directories of the cpu suite's entry (a manifest with the machine,
software and runtime blocks the system block is derived from, 8 steps of metrics, an mlperf.log); the checks
are the harness's own (:func:`harness.judge.certify.entry_checks`: the numerics check is not judged — the
manifest is not a full one — so the result is FAIL, which a verifier re-derives). As in certify, the runs'
training state is dropped (:func:`harness.commands.certify.drop_training_state`) and every file beside the
runs and ``certificate.json`` itself are written by :func:`harness.commands.certify.write_certificate`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import __version__
from harness.commands.certify import drop_training_state, write_certificate
from harness.config.profiles import load_profile
from harness.jsonio import load_json_strict
from harness.judge import certify as C
from harness.paths import PROFILES_DIR, ROOT
from harness.schema import check

MACHINE = {"device_model": "x86_64", "device_count": 1, "device_memory_gb": 8.0, "driver": None, "runtime": None,
           "cpu_cores": 2, "host_memory_gb": 23.4, "hostname": "builder"}


def _run(d: Path) -> None:
    d.mkdir(parents=True)
    manifest = {"deterministic": True, "profile": "cpu", "machine": MACHINE,
                "software": {"torch": "2.13.0", "python": "3.11.2", "threads": 2},
                "runtime": {"kind": "local", "image_id": None, "lock_sha256": None}}
    (d / "manifest.json").write_text(json.dumps(manifest))
    rows = [{"step": k, "actor/pg_loss": 0.1 * k, "perf/throughput": 1000.0 + k, "perf/mfu": 0.02,
             "perf/max_memory_allocated_gb": 0.5, "timing_s/step": 1.0} for k in range(1, 9)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "mlperf.log").write_text(':::MLLOG {"key": "run_start"}\n')
    (d / "rollouts").mkdir()  # what a local run keeps for recording a baseline: not evidence, certify drops it
    (d / "rollouts" / "initial.npz").write_bytes(b"PK")


def build(out: Path, signer: Any = None) -> dict[str, Any]:
    """Write a certificate of the cpu suite into ``out`` (new), signed by ``signer``; return its document."""
    suite_file, suite = C.load_suite("cpu")
    profile = load_profile("cpu")
    entry = suite["entries"][0]
    dirs = [out / "runs" / entry["id"] / f"run-{k}" for k in (1, 2)]
    for d in dirs:
        _run(d)
    runs = [C.rel(d, out) for d in dirs]
    drop_training_state(dirs)
    baseline = ROOT / entry["numerics"]["reference_baseline"]
    checks = C.entry_checks(entry, profile, baseline, dirs, runs, write=False)
    system = C.derive_system(profile, [load_json_strict(d / "manifest.json") for d in dirs], None)
    summary, result = C.summarize(checks)
    profile_file = PROFILES_DIR / "cpu.json"
    doc: dict[str, Any] = {
        "schema_version": 1, "created_utc": "2026-12-03T00:00:00Z", "command": "harness certify cpu",
        "harness": {"version": __version__, "revision": None, "dirty": None},
        "profile": {"name": "cpu", "path": C.rel(profile_file, ROOT), "description": profile["description"]},
        "suite": {"path": C.rel(suite_file, ROOT), "notes": list(suite["notes"])},
        "system": system,
        "entries": [{"id": entry["id"], "recipe": entry["recipe"], "scale": entry["scale"], "steps": 8,
                     "reference_baseline": entry["numerics"]["reference_baseline"],
                     "tier": entry["numerics"]["tier"], "runs": runs}],
        "checks": checks,
        "inputs": C.input_digests(ROOT, suite_file, profile_file, [ROOT / "recipes" / f"{entry['recipe']}.json"],
                                  [baseline], None),
        "results": C.result_digests(out, [(entry["id"], dirs)]), "summary": summary, "result": result,
    }
    check(doc, "certificate", str(out / C.CERT_FILE))
    write_certificate(out, doc, signer)
    return doc
