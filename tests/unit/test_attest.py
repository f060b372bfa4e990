"""Signing primitives: keys, DSSE envelopes of in-toto Statements, bounded reads (no training)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.judge import attest as A
from harness.records.base import dump
from harness.records.certificate import Certificate, DigestResult

ROOT = Path(__file__).resolve().parents[2]


def _published() -> dict:
    env = json.loads((ROOT / "certificates" / "gpu-1x-h200" / "certificate.json").read_text())
    return json.loads(base64.b64decode(env["payload"]))["predicate"]


# the published certificate with its digests replaced: what the Statement is made of
DOC = Certificate.model_validate({
    **_published(),
    "inputs": [{"role": "suite", "path": "recipes/certification/cpu.json", "value": None, "sha256": "a" * 64},
               {"role": "image-id", "path": None, "value": "sha256:x", "sha256": "b" * 64}],
    "results": [{"role": "metrics", "entry": "e", "path": "runs/e/run-1/metrics.jsonl", "sha256": "c" * 64}]})


def test_pae_matches_the_dsse_spec_test_vector() -> None:
    from securesystemslib.dsse import Envelope

    env = Envelope(b"hello world", "http://example.com/HelloWorld", {})
    assert env.pae() == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


DOCS = [("system-description.json", "d" * 64), ("certificate.html", "e" * 64)]


def test_statement_names_every_file_it_digests() -> None:
    """Subjects are the files of the certificate's directory, named relative to it: the run files, the copy of
    every input file, the documents written from the predicate."""
    st = A.statement(DOC, DOCS)
    assert st["_type"] == "https://in-toto.io/Statement/v1" and st["predicate"] == dump(DOC)
    assert st["predicateType"] == A.PREDICATE_TYPE and st["predicateType"].endswith("certificate.schema.json")
    assert st["subject"] == [{"name": "runs/e/run-1/metrics.jsonl", "digest": {"sha256": "c" * 64}},
                             {"name": "inputs/recipes/certification/cpu.json", "digest": {"sha256": "a" * 64}},
                             {"name": "system-description.json", "digest": {"sha256": "d" * 64}},
                             {"name": "certificate.html", "digest": {"sha256": "e" * 64}}]


def test_keygen_modes_and_no_overwrite(tmp_path: Path) -> None:
    priv, pub, keyid = A.keygen(tmp_path / "k")
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o600 and len(keyid) == 64
    assert b"PRIVATE KEY" in priv.read_bytes() and b"PUBLIC KEY" in pub.read_bytes()
    before = priv.read_bytes()
    with pytest.raises(HarnessError, match="refusing to overwrite") as err:
        A.keygen(tmp_path / "k")
    assert err.value.exit_code == 2 and priv.read_bytes() == before
    _, _, keyid2 = A.keygen(tmp_path / "k", force=True)
    assert keyid2 != keyid and stat.S_IMODE(os.stat(priv).st_mode) == 0o600
    assert A.load_signer(priv).public_key.keyid == A.load_public_key(pub).keyid == keyid2


def test_keys_that_cannot_sign_are_refused(tmp_path: Path) -> None:
    priv, pub, _ = A.keygen(tmp_path)
    os.chmod(priv, 0o644)
    with pytest.raises(HarnessError, match="readable by others.*chmod 600"):
        A.load_signer(priv)
    os.chmod(pub, 0o600)
    with pytest.raises(HarnessError, match="not an unencrypted PEM private key"):
        A.load_signer(pub)
    (tmp_path / "k.txt").write_text("x")
    with pytest.raises(HarnessError, match="not a PEM public key"):
        A.load_public_key(tmp_path / "k.txt")


def _signed(tmp_path: Path, name: str = "a") -> tuple[Path, Path, Path]:
    priv, pub, _ = A.keygen(tmp_path / name)
    cert = tmp_path / name / "certificate.json"
    cert.write_text(json.dumps(A.sign(A.statement(DOC, DOCS), A.load_signer(priv))))
    return cert, priv, pub


def test_signed_roundtrip_forgery_and_other_key(tmp_path: Path) -> None:
    cert, _, pub = _signed(tmp_path)
    opened = A.open_certificate(cert)
    key = A.load_public_key(pub)
    assert opened.signed and opened.keyids == [key.keyid] and opened.statement["predicate"] == dump(DOC)
    assert A.signature_problems(opened, key, "c", "p") == [] and A.subject_problems(opened, DOC, "c") == []
    # forgery: the payload edited, subjects recomputed, the old signature kept
    env = json.loads(cert.read_text())
    forged = A.statement(DOC.model_copy(update={"results": [
        DigestResult.model_validate({**dump(DOC.results[0]), "sha256": "d" * 64})]}), DOCS)
    env["payload"] = base64.b64encode(json.dumps(forged).encode()).decode()
    cert.write_text(json.dumps(env))
    problems = A.signature_problems(A.open_certificate(cert), key, "c", "p")
    assert len(problems) == 1 and "does not match the payload" in problems[0] and key.keyid in problems[0]
    # signed by another key: only the trusted keyid is named, never the unverified one the envelope claims
    other, _, other_pub = _signed(tmp_path, "b")
    other_id = A.load_public_key(other_pub).keyid
    problems = A.signature_problems(A.open_certificate(other), key, "c", "p")
    assert len(problems) == 1 and f"no signature by the trusted keyid {key.keyid}" in problems[0]
    assert other_id not in problems[0]


def test_unsigned_never_passes_a_signature_check(tmp_path: Path) -> None:
    _, pub, _ = A.keygen(tmp_path)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(A.statement(DOC)))
    opened = A.open_certificate(bare)
    assert not opened.signed
    assert "UNSIGNED" in A.signature_problems(opened, A.load_public_key(pub), "c", "p")[0]
    env = tmp_path / "nosig.json"
    env.write_text(json.dumps({"payloadType": A.PAYLOAD_TYPE, "signatures": [],
                               "payload": base64.b64encode(json.dumps(A.statement(DOC)).encode()).decode()}))
    assert "UNSIGNED" in A.signature_problems(A.open_certificate(env), A.load_public_key(pub), "c", "p")[0]


def test_subjects_must_match_the_predicate(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    st = A.statement(DOC, DOCS)
    st["subject"][0]["digest"]["sha256"] = "e" * 64
    p.write_text(json.dumps(st))
    assert "first: runs/e/run-1/metrics.jsonl" in A.subject_problems(A.open_certificate(p), DOC, "c")[0]
    p.write_text(json.dumps(A.statement(DOC, DOCS[:1])))  # the page not covered
    assert "no subject for certificate.html" in A.subject_problems(A.open_certificate(p), DOC, "c")[0]
    st = A.statement(DOC, DOCS)
    st["subject"].append({"name": "runs/e/run-1/extra", "digest": {"sha256": "f" * 64}})
    p.write_text(json.dumps(st))
    assert "(5 subjects, 4 files)" in A.subject_problems(A.open_certificate(p), DOC, "c")[0]
    p.write_text(json.dumps(A.statement(DOC, DOCS[::-1])))
    assert A.subject_problems(A.open_certificate(p), DOC, "c") != []


@pytest.mark.parametrize("content, message", [
    ("[1]", "not a certificate"),
    (json.dumps({"payloadType": "text/plain", "payload": "", "signatures": []}), "payloadType"),
    (json.dumps({"payloadType": A.PAYLOAD_TYPE, "payload": "!!", "signatures": []}), "not valid base64"),
    (json.dumps({**A.statement(DOC), "predicateType": "https://x"}), "predicateType"),
])
def test_not_a_certificate_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "c.json"
    p.write_text(content)
    with pytest.raises(HarnessError, match=message) as err:
        A.open_certificate(p)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)


def test_trust_comes_from_the_keyid(tmp_path: Path) -> None:
    cert, _, pub = _signed(tmp_path)
    keyid = A.load_public_key(pub).keyid
    assert A.trusted_key(cert, None, None) == (None, None, [])
    key, path, problems = A.trusted_key(cert, None, keyid)  # the key beside the certificate, by its keyid
    assert key.keyid == keyid and path == cert.parent / A.PUBLIC_KEY_FILE and problems == []
    _, other_pub, other_id = A.keygen(tmp_path / "other")
    key, _, problems = A.trusted_key(cert, other_pub, keyid)
    assert key is None and "is not the key of the trusted keyid" in problems[0] and other_id not in problems[0]
    with pytest.raises(HarnessError, match="certificate's own directory.*--keyid") as err:
        A.trusted_key(cert, pub, None)
    assert err.value.exit_code == 2
    with pytest.raises(HarnessError, match="a public key alone proves nothing"):
        A.trusted_key(cert, other_pub, None)
    with pytest.raises(HarnessError, match="not a keyid"):
        A.trusted_key(cert, None, keyid[:16])
    (cert.parent / A.PUBLIC_KEY_FILE).unlink()
    with pytest.raises(HarnessError, match="no signing-key.pub.pem beside the certificate"):
        A.trusted_key(cert, None, keyid)


def test_reads_are_bounded_and_regular_only(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(HarnessError, match="not a regular file"):
        A.open_certificate(fifo)  # returns at once: opened without blocking
    with pytest.raises(HarnessError, match="not a regular file"):
        A.sha256_regular(Path("/dev/zero"))
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(HarnessError, match="over the 1,024-byte limit"):
        A.read_regular(big, 1024, "certificate")
    with pytest.raises(HarnessError, match="not a regular file"):
        A.read_regular(tmp_path, 1024, "certificate")


def test_untrusted_text_is_printed_escaped() -> None:
    from harness.errors import shown

    assert shown("a\nb\x1b[2Jc\u202ed é…") == "a\\nb\\x1b[2Jc\\u202ed é…"
    line = HarnessError("keyid \x1b[31mX", file="c.json\nVERIFIED: gpu-8x-b300").one_line()
    assert "\x1b" not in line and "\n" not in line and "\\x1b[31mX" in line
