"""`harness verify-certificate FILE --keyid KEYID [--pubkey PUB] [--root REPO]`: prove a certificate still
describes its files, and that the certifier signed it.

Trust comes from ``--keyid`` alone: the 64-hex keyid the certifier published out of band (their site, a
release, this project's README). The public key is FILE's neighbour ``signing-key.pub.pem`` unless ``--pubkey``
names another; either way its keyid must be ``--keyid``, so a certificate re-signed with someone else's key
and shipped with that key fails. ``--pubkey`` without ``--keyid`` is refused (exit 2): a public key proves
nothing by itself. Then (:func:`harness.judge.certify.verify`): the signature, the Statement's subjects
against its digests, every file of FILE's directory a signed subject and nothing else there, the certificate
document against its schema, every input (relative to ``--root``; default the certificate's own ``inputs/``
copy; ``--root .`` asks whether this checkout still matches), the ``system`` block re-derived from the runs'
manifests, every check from the run directories, baselines, suite and profile, and the overall result from
the checks. Each discrepancy is one line naming the pointer (into the certificate document) and the file;
whatever the files hold is printed escaped (no control character reaches the terminal).

Exit 0 only for ``VERIFIED``: signed by the trusted keyid, everything holding (whatever the certified
result). Exit 1 for any discrepancy, a key that is not the trusted keyid's, no signature by it, an
``UNSIGNED`` certificate (never verified) or a signed one whose signature was not checked (no ``--keyid``).
Exit 2 when FILE is not a readable certificate (a malformed envelope, more than 16 signatures, a keyid that
is not 64 lowercase hex digits or appears twice, a duplicate JSON key), ``--keyid`` is malformed, or the key
is not a readable ed25519 public key.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_FINDINGS, EXIT_OK, shown

HELP = "Verify a certificate: the certifier's signature (by keyid), every file and digest, every re-derived check."
FIX = ("give --keyid with the 64-hex keyid the certifier published (their site, a release, the README), never one "
       "read from the certificate or its directory")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, metavar="FILE", help="certificate.json written by `harness certify`")
    p.add_argument("--keyid", metavar="KEYID",
                   help="the certifier's keyid (64 hex digits), as they published it: the only trust anchor; "
                        "without it the signature is not checked and the certificate is not VERIFIED")
    p.add_argument("--pubkey", type=Path, metavar="PUB",
                   help="the certifier's ed25519 public key (default: signing-key.pub.pem beside FILE); used only "
                        "with --keyid, and only when its keyid is that one")
    p.add_argument("--root", type=Path, help="what the inputs are relative to (default: the certificate's inputs/ "
                   "copy when it has one, else this checkout; give a checkout to ask whether it still matches)")


def execute(args: argparse.Namespace) -> int:
    from harness.judge.certify import verify

    v = verify(args.file, args.root, args.pubkey, args.keyid)
    name = shown(args.file)
    for line in v.problems:
        print(shown(line))
    if v.problems or v.certificate is None:  # no problem: the certificate was read into its model
        print(f"FAILED {name}: {len(v.problems)} problem{'s' if len(v.problems) > 1 else ''}"
              + ("" if v.signed else " (and the certificate is UNSIGNED)"))
        return EXIT_FINDINGS
    cert = v.certificate
    holds = shown(f"profile {cert.profile.name}, result {cert.result.upper()} ({cert.summary.checks} "
                  f"checks and the system block re-derived, {len(cert.inputs)} inputs and {v.files} files match "
                  f"their digests, nothing else in the directory; inputs checked in {v.root})")
    if cert.simulated is not None:
        print(f"SIMULATED {name}: {cert.simulated.statement} Its contents are consistent ({holds}); it is not a "
              "certificate of the profile's hardware.")
        return EXIT_FINDINGS
    if not v.signed:
        print(f"UNSIGNED {name}: NOT verified. Its contents are consistent ({holds}), but no signature binds "
              "them to a certifier: anyone can edit a result and recompute every digest. Ask for a certificate "
              "signed with `harness certify --key` and the certifier's keyid.")
        return EXIT_FINDINGS
    if not v.signature_checked:
        n = v.signatures
        print(f"UNVERIFIED {name}: it carries {n} signature{'s' if n > 1 else ''}, none checked: no trusted keyid "
              f"was given ({holds}) (fix: {FIX})")
        return EXIT_FINDINGS
    print(f"VERIFIED {name}: signed by keyid {v.verified_keyid}; {holds}")
    return EXIT_OK
