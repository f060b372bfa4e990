"""Signed certificates: ed25519 keys, in-toto Statements and DSSE envelopes.

A certificate is an in-toto Statement v1 (https://in-toto.io/Statement/v1):

- ``subject``: every file of the certificate's directory, named by its path relative to that directory,
  ``{"name", "digest": {"sha256"}}``: the run files (``runs/…``, the predicate's ``results``), the copy of
  every input file (``inputs/<path>``, with the digest the predicate gives the input) and the documents
  written from the predicate (:data:`DOCUMENTS`: ``system-description.json``, ``certificate.html``). Only
  ``certificate.json`` itself and the public key beside it (``signing-key.pub.pem``) are not subjects;
- ``predicateType``: :data:`PREDICATE_TYPE`, the id of the harness's ``certificate`` schema (the
  predicate is a document valid against ``schemas/v1/certificate.schema.json``);
- ``predicate``: the certificate content (system, checks, digests, result).

``harness certify --key KEY`` wraps it in a DSSE envelope (payloadType
``application/vnd.in-toto+json``; the signature is over DSSE's pre-authentication encoding of the
payload) signed with an ed25519 key made by ``harness keygen``. Without ``--key`` the Statement is
written bare and every reader is told it is UNSIGNED. Signing and verifying use securesystemslib's
``Envelope`` and ``CryptoSigner`` / ``SSlibKey`` (pyca/cryptography underneath); the keyid is
securesystemslib's default (SHA-256 of the canonical public-key document).

Trust comes from the keyid alone (:func:`trusted_key`): the certifier publishes it out of band, and a
public key counts only when its keyid is that one — a key shipped beside a certificate is the
certificate's own claim. An envelope carries at most :data:`MAX_SIGNATURES` signatures, each keyid 64
lowercase hex digits and none twice (refused before any signature is decoded); only the trusted keyid's
signature is verified, and only it is ever named.

Every file read here is a regular file of bounded size, opened without blocking (a FIFO or a
device is refused, never read); nothing read is unpickled or executed.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.schema_defs import SCHEMA_BASE
from harness.errors import EXIT_USAGE, HarnessError, os_error
from harness.jsonio import dumps, loads_strict
from harness.records.base import dump
from harness.records.certificate import Certificate

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = SCHEMA_BASE + "certificate.schema.json"
PRIVATE_KEY_FILE = "signing-key.pem"
PUBLIC_KEY_FILE = "signing-key.pub.pem"
INPUTS_DIR = "inputs"  # beside certificate.json: a copy of every input file, as certified
DOCUMENTS = ("system-description.json", "certificate.html")  # written from the predicate, subjects of the Statement
KEYID_RE = re.compile(r"[0-9a-f]{64}")
SHA256_RE = KEYID_RE
MAX_SIGNATURES = 16  # checked before any signature is decoded or verified
KEY_LIMIT = 64 * 1024
CERT_LIMIT = 64 * 1024 * 1024
DIGEST_LIMIT = 4 * 1024 * 1024 * 1024
WALK_LIMIT = 100_000  # entries under a certificate directory; a real one holds a few hundred


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
    _write_pair([(priv, signer.private_bytes, 0o600), (pub, public_pem(signer), 0o644)], force)
    return priv, pub, signer.public_key.keyid


def public_pem(signer: Any) -> bytes:
    """The public half of a CryptoSigner's ed25519 key, as the PEM ``keygen`` writes."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return signer._private_key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


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
def subjects(cert: Certificate, docs: list[tuple[str, str]] | tuple[()] = ()) -> list[dict[str, Any]]:
    """The Statement's subjects: every file of the certificate's directory (path relative to it) with its digest,
    in order: the results the predicate digests, the copy of every input file (``inputs/<path>``, the input's
    digest) and the ``docs`` written from the predicate (``(name, sha256)``: the system description and the
    page). Only ``certificate.json`` itself and the public key beside it are not subjects."""
    files = [(r.path, r.sha256) for r in cert.results]
    files += [(f"{INPUTS_DIR}/{i.path}", i.sha256) for i in cert.inputs if i.path is not None]
    files += list(docs)
    return [{"name": name, "digest": {"sha256": digest}} for name, digest in files]


def statement(cert: Certificate, docs: list[tuple[str, str]] | tuple[()] = ()) -> dict[str, Any]:
    """The in-toto Statement of ``cert``: its subjects (:func:`subjects`), the certificate as its predicate."""
    return {"_type": STATEMENT_TYPE, "subject": subjects(cert, docs), "predicateType": PREDICATE_TYPE,
            "predicate": dump(cert)}


def sign(stmt: dict[str, Any], signer: Any) -> dict[str, Any]:
    """The DSSE envelope (as a JSON-ready dict) of ``stmt`` signed by ``signer``."""
    from securesystemslib.dsse import Envelope

    env = Envelope(dumps(stmt).encode("utf-8"), PAYLOAD_TYPE, {})
    env.sign(signer)
    return env.to_dict()


@dataclass
class Opened:
    """A certificate file opened: the Statement, and the envelope when it is signed. ``keyids`` are the keyids the
    envelope claims (unique, 64 lowercase hex digits; none of them is verified: never print them as signers)."""

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


def _parse(text: str, name: str) -> Any:
    """Strict JSON; any refusal (a duplicate key included) means the file is not a certificate: exit 2."""
    try:
        return loads_strict(text, name)
    except HarnessError as err:
        err.exit_code = EXIT_USAGE
        raise


def _signatures(sigs: Any, name: str) -> dict[str, Any]:
    """keyid -> Signature of the envelope's entries: at most MAX_SIGNATURES (counted before anything else is
    done with them), each ``{keyid, sig}`` with a keyid of 64 lowercase hex digits, no keyid twice."""
    from securesystemslib.signer import Signature

    fix = "give the envelope certify wrote"
    if not isinstance(sigs, list):
        raise HarnessError("envelope signatures must be a list of {keyid, sig}", file=name, key_path="/signatures",
                           fix=fix)
    if len(sigs) > MAX_SIGNATURES:
        raise HarnessError(f"{len(sigs):,} signatures, more than the {MAX_SIGNATURES} a certificate may carry",
                           file=name, key_path="/signatures", fix=fix)
    out: dict[str, Any] = {}
    for i, s in enumerate(sigs):
        ptr = f"/signatures/{i}"
        if not isinstance(s, dict) or set(s) != {"keyid", "sig"}:
            raise HarnessError("a signature must be exactly {keyid, sig}", file=name, key_path=ptr, fix=fix)
        if not isinstance(s["keyid"], str) or not KEYID_RE.fullmatch(s["keyid"]):
            raise HarnessError("keyid is not 64 lowercase hex digits", file=name, key_path=f"{ptr}/keyid", fix=fix)
        if s["keyid"] in out:
            first = list(out).index(s["keyid"])
            raise HarnessError(f"the keyid of /signatures/{first} again: one signature per key", file=name,
                               key_path=f"{ptr}/keyid", fix=fix)
        out[s["keyid"]] = Signature(s["keyid"], _b64(s["sig"], name, f"{ptr}/sig").hex())
    return out


def open_certificate(path: Path) -> Opened:
    """Read a certificate (a DSSE envelope, or a bare unsigned Statement); exit 2 when it is neither."""
    from securesystemslib.dsse import Envelope

    name = str(path)
    raw = read_regular(Path(path), CERT_LIMIT, "certificate")
    try:
        doc = _parse(raw.decode("utf-8"), name)
    except UnicodeDecodeError as err:
        raise HarnessError(f"not UTF-8 text (byte {err.start})", file=name, fix="give certificate.json") from None
    if isinstance(doc, dict) and "payloadType" in doc:
        if doc["payloadType"] != PAYLOAD_TYPE:
            raise HarnessError(f"envelope payloadType is {doc['payloadType']!r}, not {PAYLOAD_TYPE!r}", file=name,
                               key_path="/payloadType", fix="give a certificate written by `harness certify`")
        extra = sorted(set(doc) - {"payloadType", "payload", "signatures"})
        if extra:
            raise HarnessError(f"unexpected envelope key {extra[0]!r}", file=name, key_path="",
                               fix="give the envelope certify wrote (payloadType, payload, signatures)")
        signatures = _signatures(doc.get("signatures"), name)
        payload = _b64(doc.get("payload"), name, "/payload")
        try:
            stmt = _parse(payload.decode("utf-8"), f"{name}::/payload")
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


# ----------------------------------------------------------------------------- trust
def trusted_key(cert_path: Path, pubkey: Path | None, keyid: str | None) -> tuple[Any, Path | None, list[str]]:
    """(key, its file, problems): the public key the verifier trusts, through ``keyid`` only.

    The keyid (SHA-256 of the key) is what the certifier publishes out of band; a public key file proves nothing
    by itself (anyone can sign a certificate with a key of their own and ship that key beside it). ``pubkey``
    defaults to the key beside the certificate and must have ``keyid``. No keyid and no key: (None, None, []) —
    the signature is not checked. Exit 2 for a malformed keyid, a key without a keyid, or no key to be found.
    """
    if keyid is None:
        if pubkey is None:
            return None, None, []
        inside = Path(pubkey).resolve().parent == Path(cert_path).resolve().parent
        raise HarnessError(("the key in the certificate's own directory is the certificate's claim, not a trust "
                            "anchor" if inside else "a public key alone proves nothing: anyone can sign with a key of "
                            "their own and hand it out") + "; it is trusted only through the keyid its owner "
                           "published", file=str(pubkey), key_path="--pubkey",
                           fix="add --keyid KEYID, the 64-hex keyid the certifier published (their site, a release, "
                               "this project's README), never one read from the certificate or its directory")
    want = keyid.strip().lower()
    if not KEYID_RE.fullmatch(want):
        raise HarnessError("not a keyid (64 hex digits)", key_path="--keyid",
                           fix="give the full keyid the certifier published (`harness keygen` and `harness certify` "
                               "print it)")
    path = Path(pubkey) if pubkey is not None else Path(cert_path).resolve().parent / PUBLIC_KEY_FILE
    if pubkey is None and not path.exists():
        raise HarnessError(f"no {PUBLIC_KEY_FILE} beside the certificate", file=str(path), key_path="--pubkey",
                           fix="give --pubkey with the certifier's public key (its keyid must be --keyid)")
    key = load_public_key(path)
    if key.keyid != want:
        return None, path, [f"{path}: the public key is not the key of the trusted keyid {want} (its keyid "
                            "differs): not the certifier's key, so nothing it signed is trusted"]
    return key, path, []


def signature_problems(opened: Opened, pubkey: Any, name: str, pub_name: str) -> list[str]:
    """Why the signature does not bind the certificate to ``pubkey``, the trusted key (empty = it does). Only the
    trusted keyid is named: the keyids the envelope claims are not verified."""
    from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError

    if not opened.signed or not opened.keyids:
        return [f"{name}: UNSIGNED: the certificate carries no signature, so nothing binds it to the trusted key "
                f"{pubkey.keyid} ({pub_name}); anyone could have written it"]
    if pubkey.keyid not in opened.keyids:
        n = len(opened.keyids)
        return [f"{name}::/signatures: no signature by the trusted keyid {pubkey.keyid} ({pub_name}); its "
                f"{n} signature{'s are' if n > 1 else ' is'} by another key"]
    try:
        pubkey.verify_signature(opened.envelope.signatures[pubkey.keyid], opened.envelope.pae())
    except (UnverifiedSignatureError, VerificationError):
        return [f"{name}::/signatures: the signature of keyid {pubkey.keyid} does not match the payload: the "
                "certificate was changed after it was signed"]
    return []


def subject_problems(opened: Opened, cert: Certificate, name: str) -> list[str]:
    """The Statement's subjects must be exactly the files of its predicate, read as ``cert`` (:func:`subjects`),
    followed by the :data:`DOCUMENTS`, each with a SHA-256."""
    docs = documents(opened)
    missing = [d for d in DOCUMENTS if d not in docs]
    if missing:
        return [f"{name}::/subject: no subject for {missing[0]}: a file certify writes is not covered"]
    want = subjects(cert, [(d, docs[d]) for d in DOCUMENTS])
    got = opened.statement.get("subject")
    if got != want:
        got = got if isinstance(got, list) else []
        have = {(str(s.get("name")), str(s.get("digest"))) for s in got if isinstance(s, dict)}  # foreign: any type
        diff = [s["name"] for s in want if (s["name"], str(s["digest"])) not in have]
        return [f"{name}::/subject: the subjects differ from the predicate's files"
                + (f" (first: {diff[0]})" if diff else f" ({len(got)} subjects, {len(want)} files)")]
    return []


def documents(opened: Opened) -> dict[str, str]:
    """name -> sha256 of the :data:`DOCUMENTS` among the Statement's subjects (those with a well-formed digest)."""
    out: dict[str, str] = {}
    got = opened.statement.get("subject")
    for s in got if isinstance(got, list) else []:
        digest = s.get("digest") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if s.get("name") in DOCUMENTS and isinstance(sha, str) and SHA256_RE.fullmatch(sha):
            out.setdefault(s["name"], sha)
    return out


# ----------------------------------------------------------------------------- the certificate's directory
def expected_files(cert: Certificate, opened: Opened, name: str) -> dict[str, tuple[str, str]]:
    """Every file the certificate's directory must hold -> (sha256, where the digest is given)."""
    out: dict[str, tuple[str, str]] = {}
    for i, result in enumerate(cert.results):
        out.setdefault(result.path, (result.sha256, f"{name}::/results/{i}"))
    for i, item in enumerate(cert.inputs):
        if item.path is not None:
            out.setdefault(f"{INPUTS_DIR}/{item.path}", (item.sha256, f"{name}::/inputs/{i} (its copy)"))
    for doc_name, sha in documents(opened).items():
        out.setdefault(doc_name, (sha, f"{name}::/subject ({doc_name})"))
    return out


def directory_problems(cert_dir: Path, cert_name: str, want: dict[str, tuple[str, str]]) -> tuple[int, list[str]]:
    """(files checked, problems): every entry under ``cert_dir`` is a directory or a regular file that is a subject
    (``cert_name`` and the public key aside), and every subject is there with its digest."""
    out: list[str] = []
    seen: set[str] = set()
    count = 0
    stack = [cert_dir]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            out.append(f"{d}: cannot list the certificate's directory ({err.strerror})")
            continue
        subdirs: list[Path] = []
        for e in entries:
            count += 1
            if count > WALK_LIMIT:
                return len(seen), out + [f"{cert_dir}: more than {WALK_LIMIT:,} entries: not a certificate directory"]
            relpath = Path(e.path).relative_to(cert_dir).as_posix()
            try:
                mode = e.stat(follow_symlinks=False).st_mode
            except OSError as err:
                out.append(f"{cert_dir}: {relpath}: cannot read it ({err.strerror})")
                continue
            if stat.S_ISLNK(mode):
                out.append(f"{cert_dir}: {relpath} is a symbolic link: a certificate directory holds regular files "
                           "only")
            elif stat.S_ISDIR(mode):
                subdirs.append(Path(e.path))
            elif relpath in (cert_name, PUBLIC_KEY_FILE):
                continue
            elif relpath not in want:
                out.append(f"{cert_dir}: {relpath} is not a signed subject of the certificate: a file it does not "
                           "cover (fix: remove it; a certificate directory holds only what certify wrote)")
            elif not stat.S_ISREG(mode):
                out.append(f"{want[relpath][1]}: {relpath} is not a regular file")
                seen.add(relpath)
            else:
                seen.add(relpath)
                out += digest_problem(cert_dir, relpath, *want[relpath])
        stack += reversed(subdirs)  # depth first, in name order
    for relpath, (_, where) in want.items():
        if relpath not in seen and not (cert_dir / relpath).is_symlink():
            out.append(f"{where}: missing file {relpath} (under {cert_dir})")
    return len(seen), out


def digest_problem(base: Path, path: str, want: str, where: str) -> list[str]:
    if not (base / path).exists():
        return [f"{where}: missing file {path} (under {base})"]
    try:
        got = sha256_regular(base / path)
    except HarnessError as err:
        return [f"{where}: cannot digest {path}: {err.message}"]
    return [] if got == want else [f"{where}: digest mismatch for {path}"]
