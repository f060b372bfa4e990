"""The certificates published in ``certificates/`` verify, and an edit to a result or an input is caught.

A published certificate binds its inputs (suite, profile, recipes, baselines and the software locks:
``constraints.txt``, ``images/*/*.lock``) by digest and carries a copy of them (``inputs/``), which
``verify-certificate`` checks by default: the certificate stays verifiable while the repository moves
on. ``--root .`` asks the other question, whether this checkout still matches what was certified.

Each is verified with the keyid ``certificates/keyids.json`` gives for it (the keyids this repository
publishes, apart from the certificate directories: the key inside a directory is trusted only through it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import forkserver
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(p.parent for p in (ROOT / "certificates").glob("*/certificate.json"))
KEYIDS = json.loads((ROOT / "certificates" / "keyids.json").read_text())


def verify(cert: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    keyid = KEYIDS[pub.parent.name]  # the published keyid of the certificate it was copied from
    return forkserver.run(["verify-certificate", str(cert), "--keyid", keyid, "--pubkey", str(pub)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def test_a_gpu_certificate_is_published() -> None:
    assert ROOT / "certificates" / "gpu-1x-h200" in PUBLISHED
    assert sorted(KEYIDS) == [p.name for p in PUBLISHED]  # every published certificate has its keyid


@pytest.mark.parametrize("cert_dir", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_published_certificate_verifies(cert_dir: Path) -> None:
    proc = verify(cert_dir / "certificate.json", cert_dir / "signing-key.pub.pem")
    assert proc.returncode == 0 and proc.stdout.startswith("VERIFIED"), proc.stdout + proc.stderr
    assert "result PASS" in proc.stdout and f"inputs checked in {cert_dir / 'inputs'}" in proc.stdout


@pytest.mark.parametrize("cert_dir", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_an_edited_run_file_is_caught(cert_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / cert_dir.name
    shutil.copytree(cert_dir, copy)
    metrics = sorted(copy.glob("runs/*/run-1/metrics.jsonl"))[0]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[-1]["perf/throughput"] = rows[-1]["perf/throughput"] * 2  # a flattering edit
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = verify(copy / "certificate.json", copy / "signing-key.pub.pem")
    assert proc.returncode == 1 and "digest mismatch" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("cert_dir", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_an_edited_input_copy_is_caught(cert_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / cert_dir.name
    shutil.copytree(cert_dir, copy)
    lock = copy / "inputs" / "constraints.txt"
    lock.write_text(lock.read_text() + "torch==9.9.9\n")  # a dependency swapped after certification
    proc = verify(copy / "certificate.json", copy / "signing-key.pub.pem")
    assert proc.returncode == 1 and "digest mismatch" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "constraints.txt" in proc.stdout + proc.stderr
