"""Hardware certification end to end on the cpu profile: certify, verify, tamper, refuse.

Budget: one `harness certify cpu` per module (the cpu suite: the VL smoke recipe, two runs of its
steps for the determinism repeat); every other test re-verifies copies of that certificate (no
training). A profile this machine does not match is refused before anything runs.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import forkserver
import pytest

from harness.jsonio import load_json_strict
from harness.judge.attest import DOCUMENTS, load_signer, open_certificate, sha256_regular, sign, statement
from harness.records.base import dump
from harness.records.certificate import Certificate
from harness.schema import schema_errors

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("HARNESS_ROOT") or ROOT)  # where recipes, profiles and baselines are read from
ENTRY = "qwen3-vl-30b-smoke"
METRICS = f"runs/{ENTRY}/run-1/metrics.jsonl"
BASELINE = "baselines/qwen3_vl_30b/cpu-smoke.json"
RECIPE = "recipes/qwen3_vl_30b.json"


def harness(cwd: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_FAULT"}
    env.update(PYTHONPATH=str(ROOT))  # HARNESS_CACHE: the session's (tests/conftest.py)
    return forkserver.run(args, cwd=cwd, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("certify")


@pytest.fixture(scope="module")
def keys(work: Path) -> dict[str, Path]:
    assert harness(work, "keygen", "--out", str(work / "keys")).returncode == 0
    assert harness(work, "keygen", "--out", str(work / "other")).returncode == 0
    return {"key": work / "keys" / "signing-key.pem", "pub": work / "keys" / "signing-key.pub.pem",
            "other": work / "other" / "signing-key.pem", "other_pub": work / "other" / "signing-key.pub.pem"}


@pytest.fixture(scope="module")
def certified(work: Path, keys: dict[str, Path]) -> dict[str, Any]:
    out = work / "cert"
    t0 = time.monotonic()
    proc = harness(work, "certify", "cpu", "--out", str(out), "--quiet", "--key", str(keys["key"]))
    print(f"certify cpu: {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"proc": proc, "dir": out, "doc": open_certificate(out / "certificate.json").statement["predicate"],
            "keys": keys}


def copy_cert(certified: dict[str, Any], dest: Path) -> Path:
    shutil.copytree(certified["dir"], dest)
    return dest / "certificate.json"


def copy_root(doc: dict[str, Any], dest: Path) -> Path:
    """A minimal checkout holding exactly the certificate's input files."""
    for item in doc["inputs"]:
        if item["path"]:
            (dest / item["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(DATA / item["path"], dest / item["path"])
    return dest


def keyid(key: Path) -> str:
    return load_signer(key).public_key.keyid


def verify(work: Path, cert: Path, root: Path | None = None, pub: Path | None = None,
           key: Path | None = None) -> subprocess.CompletedProcess[str]:
    """verify-certificate trusting the keyid of ``key`` (default the certifier's); the public key is the one
    beside the certificate unless ``pub`` is given."""
    trusted = keyid(key or work / "keys" / "signing-key.pem")
    return harness(work, "verify-certificate", str(cert), "--keyid", trusted,
                   *(["--pubkey", str(pub)] if pub else []), *(["--root", str(root)] if root else []))


def stmt_of(cert: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The Statement of ``doc`` (read into its model) with the documents beside ``cert`` as they are."""
    return statement(Certificate.model_validate(doc), [(name, sha256_regular(cert.parent / name))
                                                       for name in DOCUMENTS])


def resign(cert: Path, doc: dict[str, Any], key: Path) -> None:
    """Write ``doc`` as the certificate, signed with ``key`` (a certifier re-issuing it)."""
    cert.write_text(json.dumps(sign(stmt_of(cert, doc), load_signer(key))))


# ----------------------------------------------------------------------------- the certificate
def test_certificate_structure(certified: dict[str, Any]) -> None:
    doc, out = certified["doc"], certified["dir"]
    assert schema_errors(doc, "certificate") == []
    assert doc["result"] == "pass" and doc["profile"]["name"] == "cpu"
    assert doc["profile"]["path"] == "recipes/hardware/cpu.json"
    assert doc["suite"]["path"] == "recipes/certification/cpu.json"
    sysd = doc["system"]
    assert sysd["accelerator"]["count"] == 1 and sysd["host"]["cpu_cores"] >= 1
    assert sysd["interconnect"] == {"intra_node": "none", "inter_node": "none"}
    assert sysd["software"]["torch"] and sysd["runtime"]["kind"] == "local"
    names = [c["name"] for c in doc["checks"]]
    assert names == ["numerics", "throughput", "mfu", "memory", "determinism"]
    assert all(c["outcome"] == "pass" for c in doc["checks"]), doc["checks"]
    det = doc["checks"][-1]
    assert det["value"] == 0 and det["run"] == f"runs/{ENTRY}/run-2"
    roles = {(i["role"], i["path"]) for i in doc["inputs"]}
    for need in [("suite", "recipes/certification/cpu.json"), ("profile", "recipes/hardware/cpu.json"),
                 ("recipe", RECIPE), ("baseline", BASELINE)]:
        assert need in roles
    if (DATA / "constraints.txt").is_file():
        assert ("lock", "constraints.txt") in roles
    results = {r["path"] for r in doc["results"]}
    for k in (1, 2):
        for f in ("manifest.json", "metrics.jsonl", "verdict.json", "mlperf.log"):
            assert f"runs/{ENTRY}/run-{k}/{f}" in results
    # every file certify wrote is a subject of the signed Statement (the envelope and the public key aside)
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    names = {s["name"] for s in open_certificate(out / "certificate.json").statement["subject"]}
    assert names == files - {"certificate.json", "signing-key.pub.pem"}
    assert (out / "signing-key.pub.pem").read_bytes() == certified["keys"]["pub"].read_bytes()
    assert not any(p.startswith("/") for p in results | {i["path"] or "" for i in doc["inputs"]})
    html = (out / "certificate.html").read_text()
    assert "PASS" in html and "determinism" in html
    assert "PASS certification of cpu" in certified["proc"].stdout and "signed with keyid" in certified["proc"].stdout
    env = load_json_strict(out / "certificate.json")
    assert env["payloadType"] == "application/vnd.in-toto+json" and len(env["signatures"]) == 1
    desc = load_json_strict(out / "system-description.json")
    assert desc["accelerators_per_node"] == sysd["accelerator"]["count"] and desc["system_name"] == "cpu"
    assert (out / "runs" / ENTRY / "run-1" / "mlperf.log").is_file()


def test_verify_accepts_the_certificate_here_and_elsewhere(work: Path, certified: dict[str, Any]) -> None:
    proc = verify(work, certified["dir"] / "certificate.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("VERIFIED") and "result PASS" in proc.stdout and "signed by keyid" in proc.stdout
    # checked against its own copy of the inputs, which are the files certified
    assert f"inputs checked in {certified['dir'] / 'inputs'}" in proc.stdout
    for item in certified["doc"]["inputs"]:
        if item["path"]:
            assert (certified["dir"] / "inputs" / item["path"]).read_bytes() == (DATA / item["path"]).read_bytes()
    # moved: another directory for the certificate, another checkout holding only its inputs
    cert = copy_cert(certified, work / "moved" / "cert")
    root = copy_root(certified["doc"], work / "moved" / "root")
    proc = verify(work, cert, root)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- tampering
def test_edited_metric_is_named(work: Path, certified: dict[str, Any]) -> None:
    cert = copy_cert(certified, work / "t-metric")
    path = cert.parent / METRICS
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[-1]["actor/pg_loss"] = rows[-1]["actor/pg_loss"] + 1e-9
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = verify(work, cert)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "certificate.json::/results/" in proc.stdout and f"digest mismatch for {METRICS}" in proc.stdout
    assert "determinism" in proc.stdout  # the re-derived repeat check no longer holds either


def test_edited_baseline_number_is_named(work: Path, certified: dict[str, Any]) -> None:
    root = copy_root(certified["doc"], work / "t-baseline")
    doc = load_json_strict(root / BASELINE)
    doc["throughput"]["references"][0]["value"] *= 2
    (root / BASELINE).write_text(json.dumps(doc, indent=2) + "\n")
    proc = verify(work, certified["dir"] / "certificate.json", root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "certificate.json::/inputs/" in proc.stdout and f"digest mismatch for {BASELINE}" in proc.stdout


def test_edited_recipe_is_named(work: Path, certified: dict[str, Any]) -> None:
    root = copy_root(certified["doc"], work / "t-recipe")
    text = (root / RECIPE).read_text()
    (root / RECIPE).write_text(text.replace('"seed": 42', '"seed": 43', 1))
    assert (root / RECIPE).read_text() != text
    proc = verify(work, certified["dir"] / "certificate.json", root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"digest mismatch for {RECIPE}" in proc.stdout


def test_result_contradicting_a_check_is_tampering(work: Path, certified: dict[str, Any]) -> None:
    cert = copy_cert(certified, work / "t-result")
    doc = json.loads(json.dumps(certified["doc"]))
    doc["checks"][1]["value"] = doc["checks"][1]["threshold"] / 2  # throughput below its floor ...
    resign(cert, doc, certified["keys"]["key"])  # ... while outcome and result still say pass
    proc = verify(work, cert)
    assert proc.returncode == 1
    assert "certificate.json::/checks/1/value" in proc.stdout and "/checks/1/outcome" in proc.stdout
    doc = json.loads(json.dumps(certified["doc"]))
    doc["result"] = "fail"
    resign(cert, doc, certified["keys"]["key"])
    proc = verify(work, cert)
    assert proc.returncode == 1 and "certificate.json::/result: 'fail' contradicts the checks" in proc.stdout


def test_not_a_certificate_is_bad_input(work: Path, certified: dict[str, Any]) -> None:
    proc = verify(work, certified["dir"] / "runs" / ENTRY / "run-1" / "manifest.json")
    assert proc.returncode == 2 and "not a certificate" in proc.stderr
    assert verify(work, work / "missing.json").returncode == 2


def test_forgery_with_recomputed_digests_fails_on_the_signature(work: Path, certified: dict[str, Any]) -> None:
    """The review's forgery: edit results, recompute digests and checks with the harness's functions."""
    from harness.config.typed_files import Profile
    from harness.judge.certify import entry_checks, result_digests, summarize
    from harness.paths import ROOT as HROOT

    cert = copy_cert(certified, work / "t-forge")
    doc = json.loads(json.dumps(certified["doc"]))
    path = cert.parent / METRICS
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        if "perf/throughput" in r:
            r["perf/throughput"] *= 100
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dirs = [cert.parent / r for r in doc["entries"][0]["runs"]]
    doc["results"] = result_digests(cert.parent, [(ENTRY, run_dirs)])
    from harness.judge.certify import load_suite_file

    suite = load_suite_file(HROOT / doc["suite"]["path"], "cpu")
    profile = Profile.model_validate(load_json_strict(HROOT / doc["profile"]["path"]))
    checks = entry_checks(suite.entries[0], profile, HROOT / BASELINE, run_dirs, doc["entries"][0]["runs"],
                          write=False)
    summary, doc["result"] = summarize(checks)
    doc["checks"], doc["summary"] = [dump(c) for c in checks], dump(summary)
    env = load_json_strict(cert)
    env["payload"] = base64.b64encode(json.dumps(stmt_of(cert, doc)).encode()).decode()  # old signature kept
    cert.write_text(json.dumps(env))
    proc = verify(work, cert)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "does not match the payload: the certificate was changed after it was signed" in proc.stdout
    assert proc.stdout.count("\n") == 2 and proc.stdout.splitlines()[-1].startswith("FAILED")


def test_signed_by_another_key_names_only_the_trusted_key(work: Path, certified: dict[str, Any]) -> None:
    cert = copy_cert(certified, work / "t-otherkey")
    resign(cert, certified["doc"], certified["keys"]["other"])
    other_id = keyid(certified["keys"]["other"])
    proc = verify(work, cert)
    trusted = keyid(certified["keys"]["key"])
    assert proc.returncode == 1 and f"no signature by the trusted keyid {trusted}" in proc.stdout
    assert other_id not in proc.stdout
    # the other key beside it does not help: it is not the trusted keyid's
    proc = verify(work, cert, pub=certified["keys"]["other_pub"])
    assert proc.returncode == 1 and "is not the key of the trusted keyid" in proc.stdout
    assert verify(work, cert, pub=certified["keys"]["other_pub"], key=certified["keys"]["other"]).returncode == 0


def test_system_block_must_match_the_manifests(work: Path, certified: dict[str, Any]) -> None:
    cert = copy_cert(certified, work / "t-system")
    doc = json.loads(json.dumps(certified["doc"]))
    doc["system"]["accelerator"].update(count=8, model="NVIDIA H200")
    resign(cert, doc, certified["keys"]["key"])  # even signed by the certifier's own key
    proc = verify(work, cert)
    assert proc.returncode == 1 and "certificate.json::/system/accelerator/model: recorded 'NVIDIA H200'" in proc.stdout


def test_unsigned_is_never_verified(work: Path, certified: dict[str, Any]) -> None:
    cert = copy_cert(certified, work / "t-unsigned")
    cert.write_text(json.dumps(stmt_of(cert, certified["doc"])))
    proc = verify(work, cert)
    assert proc.returncode == 1 and "UNSIGNED" in proc.stdout and "VERIFIED" not in proc.stdout.replace("UNVERIFIED", "")
    proc = harness(work, "verify-certificate", str(cert))
    assert proc.returncode == 1 and proc.stdout.startswith("UNSIGNED") and "NOT verified" in proc.stdout
    proc = harness(work, "verify-certificate", str(certified["dir"] / "certificate.json"))
    assert proc.returncode == 1 and proc.stdout.startswith("UNVERIFIED") and "--keyid" in proc.stdout


# ----------------------------------------------------------------------------- refusal
def test_mismatched_profile_is_refused_before_anything_runs(work: Path) -> None:
    cwd = work / "refuse"
    cwd.mkdir()
    out = cwd / "cert"
    proc = harness(cwd, "certify", "gpu-8x-h100-80g", "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "does not match profile 'gpu-8x-h100-80g'" in proc.stderr and "device type" in proc.stderr
    assert not out.exists() and not (cwd / "runs").exists()


def test_cross_vendor_reference_is_judged_statistically(work: Path, certified: dict[str, Any]) -> None:
    """A run of another profile (an NPU run against the GPU reference) is judged with the statistical tier: its
    trajectory need not follow the reference's step by step."""
    from harness.judge.certify import judge_reference

    run = work / "cross" / "run"
    shutil.copytree(certified["dir"] / "runs" / ENTRY / "run-1", run)
    (run / "verdict.json").unlink()
    manifest = load_json_strict(run / "manifest.json")
    manifest["profile"] = "npu-16x-ascend-a3"
    (run / "manifest.json").write_text(json.dumps(manifest))
    v = judge_reference(run, DATA / BASELINE, "statistical", write=True)
    assert v.status == "pass" and v.tiers_applied == ["statistical"], v.reasons
    assert "cross-vendor reference recorded on 'cpu'" in v.tier_reason
    assert not any(c.group in ("throughput", "memory") for c in v.checks)
    assert schema_errors(load_json_strict(run / "verdict.json"), "verdict") == []
    assert judge_reference(run, DATA / BASELINE, "exact", write=False).status == "refused"
