"""`python -m harness run …` in a child process (record-baseline's seeds, the gate, ckpt-resume).

The child imports this checkout's package (its root goes first on PYTHONPATH), so a run made this
way is the same code as the command that made it, installed or not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from harness.paths import ROOT


def harness_run(args: list[str], *, env: dict[str, str] | None = None, **kwargs: Any
                ) -> subprocess.CompletedProcess[str]:
    """Run ``harness run ARGS`` to completion; ``env`` adds variables, ``kwargs`` go to subprocess.run."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", "run", *args], env=full_env, text=True, check=False,
                          **kwargs)
