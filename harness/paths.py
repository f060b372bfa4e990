"""Where the project's data lives: schemas, recipes, hardware profiles, baselines.

The project root is the directory above the ``harness`` package (the repository, or the copy
installed in a container image). ``HARNESS_ROOT`` overrides it.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("HARNESS_ROOT") or Path(__file__).resolve().parent.parent)
SCHEMAS_DIR = ROOT / "schemas" / "v1"
RECIPES_DIR = ROOT / "recipes"
PROFILES_DIR = RECIPES_DIR / "hardware"
BASELINES_DIR = ROOT / "baselines"
SUITES_DIR = ROOT / "recipes" / "certification"
