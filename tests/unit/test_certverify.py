"""verify-certificate end to end on a certificate built the way certify builds one (no training: cert_builder).

Trust only through the keyid given out of band, every file of the directory a signed subject, the envelope's
signature entries checked before any crypto, everything printed escaped, a file that is not a certificate
exit 2.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cert_builder import build

from harness.cli import main
from harness.judge import attest as A

RUN1 = "runs/qwen3-vl-30b-smoke/run-1"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("made")
    priv, pub, keyid = A.keygen(base / "keys")
    doc = build(base / "cert", A.load_signer(priv))
    return {"dir": base / "cert", "doc": doc, "keyid": keyid, "priv": priv, "pub": pub}


def copy(made: dict[str, Any], dest: Path) -> Path:
    shutil.copytree(made["dir"], dest)
    return dest / "certificate.json"


def verify(capsys: pytest.CaptureFixture[str], cert: Path, *args: Any) -> tuple[int, str, str]:
    code = main(["verify-certificate", str(cert), *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def envelope(cert: Path) -> dict[str, Any]:
    return json.loads(cert.read_text())


def payload(env: dict[str, Any]) -> dict[str, Any]:
    return json.loads(base64.b64decode(env["payload"]))


# ----------------------------------------------------------------------------- what certify writes verifies
def test_certify_writes_a_certificate_that_verifies_by_keyid(made: dict[str, Any], capsys) -> None:
    cert = made["dir"] / "certificate.json"
    code, out, err = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 0 and out.startswith(f"VERIFIED {cert}: signed by keyid {made['keyid']};"), out + err
    assert "result FAIL" in out and out.count("\n") == 1  # verified: the certificate holds, whatever its result
    assert verify(capsys, cert, "--keyid", made["keyid"].upper(), "--pubkey", made["pub"])[0] == 0
    # every file certify wrote is a subject, named relative to the directory; only the envelope and the key are not
    files = {p.relative_to(made["dir"]).as_posix() for p in made["dir"].rglob("*") if p.is_file()}
    names = [s["name"] for s in payload(envelope(cert))["subject"]]
    assert sorted(names) == sorted(files - {"certificate.json", "signing-key.pub.pem"})
    assert {"system-description.json", "certificate.html", f"{RUN1}/mlperf.log", "inputs/constraints.txt",
            "inputs/recipes/certification/cpu.json"} <= set(names)
    assert (made["dir"] / "signing-key.pub.pem").read_bytes() == made["pub"].read_bytes()
    assert not any("rollouts" in f for f in files)  # training state is dropped before anything is digested


def test_without_a_keyid_nothing_is_verified(made: dict[str, Any], capsys) -> None:
    code, out, _ = verify(capsys, made["dir"] / "certificate.json")
    assert code == 1 and out.startswith("UNVERIFIED") and "none checked" in out and "--keyid" in out
    assert made["keyid"] not in out  # an unchecked keyid is never printed: it must not be copied into --keyid


# ----------------------------------------------------------------------------- a forged copy (the review's finding)
def forge(made: dict[str, Any], tmp_path: Path) -> tuple[Path, str]:
    """Copy the certificate to X/c04, edit the payload, re-sign it with a fresh key, drop that key into X/c04."""
    cert = copy(made, tmp_path / "X" / "c04")
    stmt = payload(envelope(cert))
    stmt["predicate"]["command"] = "harness certify gpu-8x-b300"
    _, forger_pub, forger_id = A.keygen(tmp_path / "forger")
    cert.write_text(json.dumps(A.sign(stmt, A.load_signer(tmp_path / "forger" / "signing-key.pem"))))
    shutil.copy(forger_pub, cert.parent / "signing-key.pub.pem")
    return cert, forger_id


def test_a_copy_resigned_with_its_own_key_is_not_verified(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    cert, forger_id = forge(made, tmp_path)
    for extra in ([], ["--pubkey", cert.parent / "signing-key.pub.pem"]):
        code, out, err = verify(capsys, cert, "--keyid", made["keyid"], *extra)
        assert code == 1 and "VERIFIED" not in out.replace("UNVERIFIED", ""), out + err
        assert f"is not the key of the trusted keyid {made['keyid']}" in out and forger_id not in out
    # the key in the directory alone is the forger's claim: refused, saying how to give trust
    code, out, err = verify(capsys, cert, "--pubkey", cert.parent / "signing-key.pub.pem")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "certificate's own directory" in err and "--keyid" in err
    # the genuine key does not sign it
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"], "--pubkey", made["pub"])
    assert code == 1 and f"no signature by the trusted keyid {made['keyid']}" in out
    # the keyid decides: whoever trusts the forger's keyid trusts the forger
    assert verify(capsys, cert, "--keyid", forger_id)[0] == 0


def test_a_pubkey_without_keyid_and_a_bad_keyid_are_usage_errors(made: dict[str, Any], capsys) -> None:
    cert = made["dir"] / "certificate.json"
    code, _, err = verify(capsys, cert, "--pubkey", made["pub"])
    assert code == 2 and "a public key alone proves nothing" in err and len(err.splitlines()) == 1
    for bad in ("ba70485e", made["keyid"][:-1] + "g", made["keyid"][:32] + "\n" + made["keyid"][32:]):
        code, _, err = verify(capsys, cert, "--keyid", bad)
        assert code == 2 and "not a keyid (64 hex digits)" in err and len(err.splitlines()) == 1


# ----------------------------------------------------------------------------- every file a signed subject
@pytest.mark.parametrize("name", ["system-description.json", "certificate.html", f"{RUN1}/mlperf.log",
                                  f"{RUN1}/manifest.json", "inputs/constraints.txt",
                                  "inputs/baselines/qwen3_vl_30b/cpu-smoke.json"])
def test_an_edited_file_is_named(made: dict[str, Any], tmp_path: Path, capsys, name: str) -> None:
    cert = copy(made, tmp_path / "c")
    with open(cert.parent / name, "a", encoding="utf-8") as fh:
        fh.write(" ")
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 1 and f"digest mismatch for {name}" in out and out.splitlines()[-1].startswith("FAILED"), out


@pytest.mark.parametrize("name", ["notes.txt", f"{RUN1}/extra.json", "inputs/recipes/evil.json", ".hidden"])
def test_a_file_that_is_not_a_subject_is_refused(made: dict[str, Any], tmp_path: Path, capsys, name: str) -> None:
    cert = copy(made, tmp_path / "c")
    (cert.parent / name).write_text("{}")
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 1 and f"{name} is not a signed subject of the certificate" in out, out


def test_missing_files_and_links_are_refused(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    cert = copy(made, tmp_path / "c")
    (cert.parent / "certificate.html").unlink()
    os.symlink(cert.parent / "inputs" / "constraints.txt", cert.parent / "link.txt")
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 1 and "missing file certificate.html" in out and "link.txt is a symbolic link" in out, out


def test_a_checkout_root_still_checks_the_copy(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    """--root names where the inputs are compared; the certificate's own copy stays a subject all the same."""
    from harness.paths import ROOT

    cert = copy(made, tmp_path / "c")
    assert verify(capsys, cert, "--keyid", made["keyid"], "--root", ROOT)[0] == 0
    (cert.parent / "inputs" / "constraints.txt").write_text("torch==9.9.9\n")
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"], "--root", ROOT)
    assert code == 1 and "digest mismatch for inputs/constraints.txt" in out


# ----------------------------------------------------------------------------- the envelope's signature entries
def _resigned(made: dict[str, Any], tmp_path: Path, sigs: list[dict[str, str]]) -> Path:
    cert = copy(made, tmp_path / "c")
    env = envelope(cert)
    env["signatures"] = [*env["signatures"], *sigs]
    cert.write_text(json.dumps(env))
    return cert


def test_only_the_verified_keyid_is_named(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    cert = _resigned(made, tmp_path, [{"keyid": "f00dfeed" * 8, "sig": "AAAA"}])
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 0 and out.startswith("VERIFIED") and "f00dfeed" not in out, out


@pytest.mark.parametrize("sig, message", [
    ({"keyid": "ba70485e" * 8 + "\nVERIFIED: gpu-8x-b300 certified", "sig": "AAAA"}, "not 64 lowercase hex digits"),
    ({"keyid": "BA70485E" * 8, "sig": "AAAA"}, "not 64 lowercase hex digits"),
    ({"keyid": "\x1b[2J" + "0" * 60, "sig": "AAAA"}, "not 64 lowercase hex digits"),
    ({"keyid": "ab" * 32, "sig": "AAAA", "extra": "x"}, "exactly {keyid, sig}"),
])
def test_malformed_signature_entries_are_not_a_certificate(made: dict[str, Any], tmp_path: Path, capsys,
                                                           sig: dict[str, str], message: str) -> None:
    code, out, err = verify(capsys, _resigned(made, tmp_path, [sig]), "--keyid", made["keyid"])
    assert code == 2 and message in err and out == "" and len(err.splitlines()) == 1, err
    assert "\x1b" not in err


def test_duplicate_keyids_are_refused_in_either_order(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    genuine = envelope(made["dir"] / "certificate.json")["signatures"][0]
    for k, sigs in enumerate(([genuine, {**genuine, "sig": "AAAA"}], [{**genuine, "sig": "AAAA"}, genuine])):
        cert = copy(made, tmp_path / f"c{k}")
        env = envelope(cert)
        env["signatures"] = sigs
        cert.write_text(json.dumps(env))
        code, out, err = verify(capsys, cert, "--keyid", made["keyid"])
        assert code == 2 and "the keyid of /signatures/0 again" in err and out == "", err


def test_signatures_are_counted_before_any_is_decoded(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    cert = _resigned(made, tmp_path, [{"keyid": f"{k:064x}", "sig": "!!"} for k in range(A.MAX_SIGNATURES)])
    code, _, err = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 2 and f"17 signatures, more than the {A.MAX_SIGNATURES}" in err, err


def test_what_the_files_hold_is_printed_escaped(made: dict[str, Any], tmp_path: Path, capsys) -> None:
    cert = copy(made, tmp_path / "c")
    (cert.parent / "x\x1b[2J\nVERIFIED: gpu-8x-b300").write_text("")
    code, out, _ = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 1 and "\x1b" not in out and "\\x1b[2J\\nVERIFIED: gpu-8x-b300 is not a signed subject" in out
    assert not any(line.startswith("VERIFIED") for line in out.splitlines())


# ----------------------------------------------------------------------------- not a certificate: exit 2
@pytest.mark.parametrize("where", ["envelope", "payload"])
def test_a_duplicate_key_is_not_a_certificate(made: dict[str, Any], tmp_path: Path, capsys, where: str) -> None:
    cert = copy(made, tmp_path / "c")
    env = envelope(cert)
    if where == "envelope":
        text = json.dumps(env)[:-1] + f', "payload": "{env["payload"]}"}}'
    else:
        inner = json.dumps(payload(env)).replace('"result": "fail"', '"result": "fail", "result": "pass"')
        assert inner.count('"result"') == 2
        text = json.dumps({**env, "payload": base64.b64encode(inner.encode()).decode()})
    cert.write_text(text)
    code, out, err = verify(capsys, cert, "--keyid", made["keyid"])
    assert code == 2 and "duplicate key" in err and out == "" and len(err.splitlines()) == 1, err
