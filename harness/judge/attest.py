"""Signed certificates: ed25519 keys, in-toto Statements and DSSE envelopes.

A certificate is an in-toto Statement v1 (https://in-toto.io/Statement/v1):

- ``subject``: every file the certificate digests, results (paths relative to the certificate's
  directory) and inputs (paths relative to the repository root), each ``{"name", "digest":
  {"sha256"}}``;
- ``predicateType``: :data:`PREDICATE_TYPE`, the id of the harness's ``certificate`` schema (the
  predicate is a document valid against ``schemas/v1/certificate.schema.json``);
- ``predicate``: the certificate content (system, checks, digests, result).

``harness certify --key KEY`` wraps it in a DSSE envelope (payloadType
``application/vnd.in-toto+json``; the signature is over DSSE's pre-authentication encoding of the
payload) signed with an ed25519 key made by ``harness keygen``. Without ``--key`` the Statement is
written bare and every reader is told it is UNSIGNED. Signing and verifying use securesystemslib's
``Envelope`` and ``CryptoSigner`` / ``SSlibKey`` (pyca/cryptography underneath); the keyid is
securesystemslib's default (SHA-256 of the canonical public-key document).

Every file read here is a regular file of bounded size, opened without blocking (a FIFO or a
device is refused, never read); nothing read is unpickled or executed.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.schema_defs import SCHEMA_BASE
from harness.errors import HarnessError, os_error
from harness.jsonio import dumps, loads_strict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = SCHEMA_BASE + "certificate.schema.json"
PRIVATE_KEY_FILE = "signing-key.pem"
PUBLIC_KEY_FILE = "signing-key.pub.pem"
KEY_LIMIT = 64 * 1024
CERT_LIMIT = 64 * 1024 * 1024
DIGEST_LIMIT = 4 * 1024 * 1024 * 1024


# ----------------------------------------------------------------------------- bounded reads
def _open_regular(path: Path, limit: int, what: str) -> tuple[int, int]:
    """(fd, size) of a regular file no larger than ``limit``; anything else is a one-line error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise HarnessError(f"{what} not found", file=str(path), fix="check the path") from None
    except IsADirectoryError:
        raise HarnessError(f"{what} is a directory", file=str(path), fix="name a file") from None
    except OSError as err:
        raise HarnessError(f"cannot open {what} ({err.strerror})", file=str(path), fix="check permissions") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise HarnessError(f"{what} is not a regular file", file=str(path), fix="name a regular file")
    if st.st_size > limit:
        os.close(fd)
        raise HarnessError(f"{what} is {st.st_size:,} bytes, over the {limit:,}-byte limit", file=str(path),
                           fix=f"name the right file (a {what} is far smaller)")
    return fd, st.st_size


def read_regular(path: Path, limit: int, what: str) -> bytes:
    fd, _ = _open_regular(Path(path), limit, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew while read
        raise HarnessError(f"{what} is over the {limit:,}-byte limit", file=str(path), fix="name the right file")
    return data


def sha256_regular(path: Path, limit: int = DIGEST_LIMIT, what: str = "file") -> str:
    """SHA-256 of a regular file, streamed (bounded memory) and bounded in size."""
    fd, _ = _open_regular(Path(path), limit, what)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------- keys
def _stage(path: Path, data: bytes, mode: int) -> Path:
    """``data`` in a new temporary file beside ``path`` with ``mode`` (O_EXCL, no symlink followed), fsynced."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError as err:
        raise os_error(err, path) from None
    try:
        os.fchmod(fd, mode)  # whatever the umask
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
            fh.flush()
        os.fsync(fd)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise os_error(err, path) from None
    finally:
        os.close(fd)
    return tmp


def _link_new(tmp: Path, path: Path) -> None:
    """``tmp`` also as ``path``, which must not exist (a hard link: atomic, never over a file)."""
    try:
        os.link(tmp, path)
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP) or os.path.lexists(path):
            raise
        os.rename(tmp, path)  # a file system without hard links: checked just before instead


def _write_pair(files: list[tuple[Path, bytes, int]], force: bool) -> None:
    """Write every (path, data, mode) whole or none of them: each is staged in a temporary file first (a full or
    read-only disk leaves no partial key), then renamed over its path (``force``) or linked to it (never over an
    existing file; a key pair half in place is taken back)."""
    staged: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for path, data, mode in files:
            staged.append((_stage(path, data, mode), path))
        for tmp, path in staged:
            if force:
                os.replace(tmp, path)
            else:
                _link_new(tmp, path)
                placed.append(path)
    except FileExistsError as err:
        for path in placed:
            path.unlink(missing_ok=True)
        raise HarnessError("a key is already there; refusing to overwrite it", file=str(err.filename),
                           key_path="--out", fix="choose another --out, or --force to replace the key pair") from None
    except OSError as err:
        for path in placed:
            path.unlink(missing_ok=True)
        raise os_error(err, staged[-1][1] if staged else None) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def keygen(out_dir: Path, *, force: bool = False) -> tuple[Path, Path, str]:
    """A new ed25519 key pair in ``out_dir``: (private key path, public key path, keyid)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    from securesystemslib.signer import CryptoSigner

    out_dir = Path(out_dir)
    priv, pub = out_dir / PRIVATE_KEY_FILE, out_dir / PUBLIC_KEY_FILE
    if out_dir.exists() and not out_dir.is_dir():
        raise HarnessError("is not a directory", file=str(out_dir), key_path="--out", fix="name a directory")
    existing = [p for p in (priv, pub) if p.exists() or p.is_symlink()]
    if existing and not force:
        raise HarnessError("a key is already there; refusing to overwrite it", file=str(existing[0]),
                           key_path="--out", fix="choose another --out, or --force to replace the key pair")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise os_error(err, out_dir, doing="create the key directory") from None
    signer = CryptoSigner.generate_ed25519()
    pem = signer._private_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    _write_pair([(priv, signer.private_bytes, 0o600), (pub, pem, 0o644)], force)
    return priv, pub, signer.public_key.keyid


def load_signer(path: Path) -> Any:
    """A securesystemslib CryptoSigner for the ed25519 private key (PEM, PKCS#8) at ``path``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner

    path = Path(path)
    data = read_regular(path, KEY_LIMIT, "private key")
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise HarnessError(f"private key is readable by others (mode {stat.S_IMODE(mode):04o})", file=str(path),
                           key_path="--key", fix=f"chmod 600 {path}")
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise HarnessError(f"not an unencrypted PEM private key ({err})", file=str(path), key_path="--key",
                           fix="give the signing-key.pem written by `harness keygen`") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise HarnessError(f"not an ed25519 key ({type(key).__name__})", file=str(path), key_path="--key",
                           fix="make one with `harness keygen --out DIR`")
    return CryptoSigner(key)


def load_public_key(path: Path) -> Any:
    """A securesystemslib SSlibKey for the ed25519 public key (PEM) at ``path``."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    data = read_regular(Path(path), KEY_LIMIT, "public key")
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError) as err:
        raise HarnessError(f"not a PEM public key ({err})", file=str(path), key_path="--pubkey",
                           fix="give the signing-key.pub.pem the certifier published") from None
    if not isinstance(key, Ed25519PublicKey):
        raise HarnessError(f"not an ed25519 public key ({type(key).__name__})", file=str(path), key_path="--pubkey",
                           fix="give the signing-key.pub.pem the certifier published")
    return SSlibKey.from_crypto(key)


# ----------------------------------------------------------------------------- statements and envelopes
def subjects(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One subject per digested file of a certificate document: results, then inputs."""
    files = [(r["path"], r["sha256"]) for r in doc["results"]]
    files += [(i["path"], i["sha256"]) for i in doc["inputs"] if i["path"] is not None]
    return [{"name": name, "digest": {"sha256": digest}} for name, digest in files]


def statement(doc: dict[str, Any]) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE, "subject": subjects(doc), "predicateType": PREDICATE_TYPE, "predicate": doc}


def sign(stmt: dict[str, Any], signer: Any) -> dict[str, Any]:
    """The DSSE envelope (as a JSON-ready dict) of ``stmt`` signed by ``signer``."""
    from securesystemslib.dsse import Envelope

    env = Envelope(dumps(stmt).encode("utf-8"), PAYLOAD_TYPE, {})
    env.sign(signer)
    return env.to_dict()


@dataclass
class Opened:
    """A certificate file opened: the Statement, and the envelope when it is signed."""

    statement: dict[str, Any]
    envelope: Any = None  # securesystemslib Envelope, None when unsigned
    keyids: list[str] = field(default_factory=list)

    @property
    def signed(self) -> bool:
        return self.envelope is not None


def _b64(value: Any, name: str, ptr: str) -> bytes:
    if not isinstance(value, str):
        raise HarnessError("not a base64 string", file=name, key_path=ptr, fix="give the envelope certify wrote")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise HarnessError("not valid base64", file=name, key_path=ptr, fix="give the envelope certify wrote") from None


def open_certificate(path: Path) -> Opened:
    """Read a certificate (a DSSE envelope, or a bare unsigned Statement); exit 2 when it is neither."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import Signature

    name = str(path)
    raw = read_regular(Path(path), CERT_LIMIT, "certificate")
    try:
        doc = loads_strict(raw.decode("utf-8"), name)
    except UnicodeDecodeError as err:
        raise HarnessError(f"not UTF-8 text (byte {err.start})", file=name, fix="give certificate.json") from None
    if isinstance(doc, dict) and "payloadType" in doc:
        if doc["payloadType"] != PAYLOAD_TYPE:
            raise HarnessError(f"envelope payloadType is {doc['payloadType']!r}, not {PAYLOAD_TYPE!r}", file=name,
                               key_path="/payloadType", fix="give a certificate written by `harness certify`")
        sigs = doc.get("signatures")
        if not isinstance(sigs, list) or not all(isinstance(s, dict) and isinstance(s.get("keyid"), str)
                                                 for s in sigs):
            raise HarnessError("envelope signatures must be a list of {keyid, sig}", file=name,
                               key_path="/signatures", fix="give the envelope certify wrote")
        payload = _b64(doc.get("payload"), name, "/payload")
        signatures = {}
        for i, s in enumerate(sigs):
            signatures[s["keyid"]] = Signature(s["keyid"], _b64(s.get("sig"), name, f"/signatures/{i}/sig").hex())
        try:
            stmt = loads_strict(payload.decode("utf-8"), f"{name}::/payload")
        except UnicodeDecodeError:
            raise HarnessError("payload is not UTF-8 JSON", file=name, key_path="/payload",
                               fix="give the envelope certify wrote") from None
        opened = Opened(stmt, Envelope(payload, PAYLOAD_TYPE, signatures), list(signatures))
    else:
        opened = Opened(doc)
    stmt = opened.statement
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise HarnessError(f"not a certificate (an in-toto Statement, _type {STATEMENT_TYPE})", file=name,
                           fix="give the certificate.json written by `harness certify`")
    if stmt.get("predicateType") != PREDICATE_TYPE or not isinstance(stmt.get("predicate"), dict):
        raise HarnessError(f"predicateType {stmt.get('predicateType')!r} is not the harness certificate "
                           f"({PREDICATE_TYPE})", file=name, key_path="/predicateType",
                           fix="give a certificate written by `harness certify`")
    return opened


def signature_problems(opened: Opened, pubkey: Any, name: str, pub_name: str) -> list[str]:
    """Why the signature does not bind the certificate to ``pubkey`` (empty = it does)."""
    from securesystemslib.exceptions import VerificationError

    if not opened.signed or not opened.keyids:
        return [f"{name}: UNSIGNED: the certificate carries no signature, so nothing binds it to the key in "
                f"{pub_name} (keyid {pubkey.keyid}); anyone could have written it"]
    if pubkey.keyid not in opened.keyids:
        return [f"{name}::/signatures: signed by keyid {', '.join(opened.keyids)}, not by the key in {pub_name} "
                f"(keyid {pubkey.keyid}): signed with another key"]
    try:
        opened.envelope.verify([pubkey], 1)
    except VerificationError:
        return [f"{name}::/signatures: the signature of keyid {pubkey.keyid} does not match the payload: the "
                "certificate was changed after it was signed"]
    return []


def subject_problems(opened: Opened, name: str) -> list[str]:
    """The Statement's subjects must be exactly the digests its predicate lists."""
    stmt = opened.statement
    want = subjects(stmt["predicate"]) if all(k in stmt["predicate"] for k in ("inputs", "results")) else None
    if want is None:
        return []  # the predicate's schema check reports it
    if stmt.get("subject") != want:
        got: list[Any] = stmt["subject"] if isinstance(stmt.get("subject"), list) else []
        have = {(s.get("name"), str(s.get("digest"))) for s in got if isinstance(s, dict)}
        diff = [s["name"] for s in want if (s["name"], str(s["digest"])) not in have]
        return [f"{name}::/subject: the subjects differ from the predicate's digests"
                + (f" (first: {diff[0]})" if diff else f" ({len(got)} subjects, {len(want)} digests)")]
    return []
