"""harness.lazyimport: the stand-in imports on first use and leaves sys.modules to ordinary imports."""

from __future__ import annotations

import subprocess
import sys

from harness.lazyimport import lazy_import

# In a fresh interpreter: a lazy torch, then the import that broke the standard library's LazyLoader (a submodule
# imported before any attribute of the package was read), then the stand-in's first use.
SCRIPT = """
import sys
from harness.lazyimport import lazy_import
torch = lazy_import("torch")
assert "torch" not in sys.modules, "the stand-in must not register a module"
import torch.distributed as dist
assert sys.modules["torch"].distributed is dist
assert torch.zeros(2).sum().item() == 0.0 and torch.Tensor is sys.modules["torch"].Tensor
print("ok")
"""


def test_a_submodule_import_before_first_use_loads_torch_once() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_first_use_imports_and_reads_the_attribute() -> None:
    json_ = lazy_import("json")
    assert "not imported yet" in repr(json_)
    assert json_.dumps([1]) == "[1]" and "imported" in repr(json_)


def test_loaded_gives_the_module_itself() -> None:
    import json

    from harness.lazyimport import loaded
    stand_in = lazy_import("json")
    assert loaded(stand_in) is json and "imported" in repr(stand_in) and loaded(json) is json
