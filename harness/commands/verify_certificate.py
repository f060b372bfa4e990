"""`harness verify-certificate FILE --pubkey PUB [--root REPO]`: prove a certificate still describes its files.

Opens the certificate (a DSSE envelope holding an in-toto Statement, or a bare unsigned Statement;
:mod:`harness.judge.attest`), checks the signature against ``--pubkey``, the Statement's subjects
against its digests, validates the certificate document against its schema, recomputes the
SHA-256 of every input (relative to ``--root``; default the certificate's own ``inputs/`` copy when it
has one, else this checkout; ``--root .`` asks whether this checkout still matches) and every result (relative
to the certificate's directory), re-derives the ``system`` block from the runs' manifests and every
check from the run directories, baselines, suite and profile, and the overall result from the
checks. Each discrepancy is one line naming the pointer (into the certificate document) and the file.

Exit 0 only for ``VERIFIED``: signed, the signature checked with ``--pubkey``, everything holding
(whatever the certified result). Exit 1 for any discrepancy, a signature by another key, an
``UNSIGNED`` certificate (never verified, with or without ``--pubkey``) or a signed one whose
signature was not checked (no ``--pubkey``). Exit 2 when FILE is not a readable certificate or the
key is not a readable ed25519 public key.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_FINDINGS, EXIT_OK

HELP = "Verify a certificate: its signature, every digest, the system block and every re-derived check."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, metavar="FILE", help="certificate.json written by `harness certify`")
    p.add_argument("--pubkey", type=Path, metavar="PUB",
                   help="the certifier's ed25519 public key (signing-key.pub.pem); without it the signature is not "
                        "checked and the certificate is not VERIFIED")
    p.add_argument("--root", type=Path, help="what the inputs are relative to (default: the certificate's inputs/ "
                   "copy when it has one, else this checkout; give a checkout to ask whether it still matches)")


def execute(args: argparse.Namespace) -> int:
    from harness.judge.certify import verify

    v = verify(args.file, args.root, args.pubkey)
    for line in v.problems:
        print(line)
    doc = v.doc
    if v.problems:
        print(f"FAILED {args.file}: {len(v.problems)} problem{'s' if len(v.problems) > 1 else ''}"
              + ("" if v.signed else " (and the certificate is UNSIGNED)"))
        return EXIT_FINDINGS
    holds = (f"profile {doc['profile']['name']}, result {doc['result'].upper()} ({doc['summary']['checks']} checks "
             f"and the system block re-derived, {len(doc['inputs'])} inputs and {len(doc['results'])} results match "
             f"their digests; inputs checked in {v.root})")
    if not v.signed:
        print(f"UNSIGNED {args.file}: NOT verified. Its contents are consistent ({holds}), but no signature binds "
              "them to a certifier: anyone can edit a result and recompute every digest. Ask for a certificate "
              "signed with `harness certify --key` and the certifier's public key.")
        return EXIT_FINDINGS
    if not v.signature_checked:
        print(f"UNVERIFIED {args.file}: signed by keyid {', '.join(v.keyids)}, but the signature was not checked "
              f"({holds}) (fix: give --pubkey with the certifier's signing-key.pub.pem)")
        return EXIT_FINDINGS
    print(f"VERIFIED {args.file}: signed by keyid {', '.join(v.keyids)}; {holds}")
    return EXIT_OK
