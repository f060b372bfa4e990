"""``lazy_import(name)``: a stand-in for a module that imports it on its first attribute access.

For the modules that a light command reads only for names or refuses before any tensor exists (the algorithm
registries: ``harness validate`` checks a recipe's names without importing torch, 1.6 s of a 4 s validate on an
AVX2 EPYC core; the checkpoint and state-file modules: a refused run answers in 0.7 s instead of 2.6 s).

The stand-in is local to the module that holds it: ``sys.modules`` is not touched, so every other ``import torch``
(or ``import torch.distributed``) is an ordinary import. The standard library's ``importlib.util.LazyLoader``
registers its lazy module there instead, and a later ``import torch.distributed`` then loaded ``torch`` while
looking up its ``__path__``, past the import system's check, and ran ``torch.distributed`` a second time (a resumed
run aborted: ``cannot initialize type "GradBucket": an object with that name is already defined``). The first use
imports with :func:`importlib.import_module`, under the import system's locks.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Attribute access imports ``name`` (once) and reads the attribute from it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:  # only for attributes this object lacks: the module's
        return getattr(self._load(), attr)

    def _load(self) -> ModuleType:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return module

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r} ({'imported' if self._module else 'not imported yet'})>"


def lazy_import(name: str) -> Any:
    """A :class:`LazyModule` for ``name``: the module is imported when an attribute is first read."""
    return LazyModule(name)


def loaded(module: Any) -> ModuleType:
    """The module itself: a :class:`LazyModule`'s, imported now if it was not yet; any other module as it is.

    For code that ``torch.compile`` traces: Dynamo does not trace :mod:`importlib`, so a stand-in whose first
    attribute access happens inside a traced function breaks the graph there.
    """
    return module._load() if isinstance(module, LazyModule) else module  # noqa: SLF001
