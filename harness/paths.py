"""Where the project's data lives: schemas, recipes, hardware profiles, baselines.

The project root is the directory above the ``harness`` package (the repository, or the copy
installed in a container image). ``HARNESS_ROOT`` overrides it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import HarnessError

ROOT = Path(os.environ.get("HARNESS_ROOT") or Path(__file__).resolve().parent.parent)
SCHEMAS_DIR = ROOT / "schemas" / "v1"
RECIPES_DIR = ROOT / "recipes"
PROFILES_DIR = RECIPES_DIR / "hardware"
BASELINES_DIR = ROOT / "baselines"
SUITES_DIR = ROOT / "recipes" / "certification"

# a name read from a record or the command line that becomes one path component: letters, digits, _ and -, with
# single dots between them (no '/', no '.' or '..', nothing hidden)
SAFE_NAME = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"


def safe_name(name: object, *, what: str, file: str | None = None, key_path: str | None = None) -> str:
    """``name`` if it can be one path component (:data:`SAFE_NAME`), else a one-line :class:`HarnessError`."""
    if not isinstance(name, str) or not re.fullmatch(SAFE_NAME, name):
        raise HarnessError(f"{what} {name!r} cannot be used in a path (only letters, digits, '_', '-' and single "
                           "dots inside a name: no '/', '..' or leading dot)", file=file, key_path=key_path,
                           fix=f"give a valid {what}")
    return name
