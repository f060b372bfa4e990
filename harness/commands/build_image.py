"""`harness build-image cpu|cuda|ascend`: build the locked runtime image and record its id."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.errors import EXIT_OK, HarnessError

HELP = "build the locked container image (cpu offline; cuda / ascend need their registry)"


def _repo_root() -> Path:
    """The checkout holding images/ and harness/ (the current directory or the package's parent)."""
    for cand in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (cand / "images").is_dir() and (cand / "harness").is_dir():
            return cand
    raise HarnessError("cannot find the images/ folder of a harness checkout",
                       fix="run from the repository root, or pass --repo-root")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=("cpu", "cuda", "ascend"), help="which image to build")
    parser.add_argument("--repo-root", type=Path, default=None, help="repository root (default: found)")
    parser.add_argument("--refresh-base", action="store_true",
                        help="cpu: accept a rebuilt Debian base whose id differs from base.lock.json "
                             "and record the new id")
    parser.add_argument("--base-only", action="store_true", help="cpu: build / load the Debian base only")
    parser.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="cuda / ascend: override a Dockerfile ARG, e.g. CANN_IMAGE=name:tag@sha256:... "
                             "or FLASH_ATTN_CUDA_ARCHS='90;100' (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the build record as JSON")


def execute(args: argparse.Namespace) -> int:
    from harness import images  # noqa: PLC0415 - keeps `harness --help` free of the docker SDK

    root = (args.repo_root or _repo_root()).resolve()
    if args.base_only:
        if args.kind != "cpu":
            raise HarnessError("--base-only applies to the cpu image", key_path="--base-only")
        record = images.build_base(root, refresh=args.refresh_base)
        record.pop("packages", None)
    else:
        if args.refresh_base and args.kind != "cpu":
            raise HarnessError("--refresh-base applies to the cpu image", key_path="--refresh-base")
        build_args = {}
        for item in args.build_arg:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise HarnessError(f"--build-arg {item!r} is not KEY=VALUE", key_path="--build-arg")
            build_args[key] = value
        record = images.build_image(args.kind, repo_root=root, refresh_base=args.refresh_base,
                                    build_args=build_args)
    if args.json:
        json.dump(record, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        tag = record.get("tag", "")
        print(f"{tag} {record.get('image_id')}")
        if "lock_sha256" in record:
            print(f"lock sha256 {record['lock_sha256']}  (recorded in images/{args.kind}/built.json)")
    return EXIT_OK
