"""`harness verify-certificate FILE [--root REPO]`: prove a certificate still describes its files.

Validates the certificate against its schema, recomputes the SHA-256 of every input (relative to
``--root``, default this checkout) and every result (relative to the certificate's directory),
re-derives every check from the run directories, baselines, suite and profile, and the overall
result from the checks. Each discrepancy is one line naming the certificate pointer and the file.
Exit 0 when everything holds (whatever the certified result), 1 on any discrepancy (tampering),
2 when FILE is not a readable certificate.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_FINDINGS, EXIT_OK

HELP = "Verify a certificate: recompute every digest and re-derive every check and the overall result."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, metavar="FILE", help="certificate.json written by `harness certify`")
    p.add_argument("--root", type=Path, help="repository checkout the inputs are relative to (default: this one)")


def execute(args: argparse.Namespace) -> int:
    from harness.certify import verify
    from harness.jsonio import load_json_strict

    problems = verify(args.file, args.root)
    for line in problems:
        print(line)
    if problems:
        print(f"TAMPERED {args.file}: {len(problems)} discrepanc{'ies' if len(problems) > 1 else 'y'}")
        return EXIT_FINDINGS
    doc = load_json_strict(args.file)
    print(f"VERIFIED {args.file}: profile {doc['profile']['name']}, result {doc['result'].upper()} "
          f"({doc['summary']['checks']} checks re-derived, {len(doc['inputs'])} inputs and "
          f"{len(doc['results'])} results match their digests)")
    return EXIT_OK
