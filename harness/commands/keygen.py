"""`harness keygen --out DIR [--force]`: an ed25519 key pair for signing certificates.

Writes ``DIR/signing-key.pem`` (the private key, PKCS#8 PEM, created mode 0600) and
``DIR/signing-key.pub.pem`` (the public key; ``certify`` writes it beside the certificate), and prints
the keyid: the fingerprint to publish apart from the certificates, the only thing a verifier trusts. An
existing key is never overwritten without ``--force``. Both files are written to
temporary files first and renamed (or linked) into place: a full or read-only disk leaves no partial key, and
the error is one line naming the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_OK

HELP = "Make an ed25519 key pair for signing certificates (harness certify --key)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the key pair")
    p.add_argument("--force", action="store_true", help="replace a key pair already in DIR")


def execute(args: argparse.Namespace) -> int:
    from harness.judge.attest import keygen

    priv, pub, keyid = keygen(args.out, force=args.force)
    print(f"private key: {priv} (mode 0600; keep it secret: `harness certify PROFILE --key {priv}`)")
    print(f"public key:  {pub} (certify puts it beside the certificate; readers trust it only through the keyid)")
    print(f"keyid:       {keyid} (publish it apart from your certificates: your site, a release; readers run "
          f"`harness verify-certificate FILE --keyid {keyid}`)")
    return EXIT_OK
