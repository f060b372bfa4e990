"""``lazy_import(name)``: a module that loads on its first attribute access (the standard library's
:class:`importlib.util.LazyLoader`, as the Python docs' "Implementing lazy imports" recipe uses it).

For the modules that a light command reads only for names (the algorithm registries: ``harness validate``
checks a recipe's names without importing torch, 1.6 s of a 4 s validate on an AVX2 EPYC core) and whose
functions need the heavy module once called. A module already imported is returned as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``sys.modules[name]`` if imported, else a lazy module registered there (any later ``import name``
    gets the same object, loaded on its first attribute access)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
