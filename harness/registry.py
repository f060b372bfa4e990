"""``Registry[T]``: named implementations of one kind (advantage estimators, policy losses, KL kinds,
rewards, synthetic tasks, tiers).

A registry is a dict of name → implementation that refuses a name twice (a failed registration inserts
nothing) and answers an unknown name with the valid ones. The JSON Schemas take their enums from the
registries (:mod:`harness.config.schema_defs`), so adding an implementation is one decorated function and its
test; the schema and docs follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from harness.errors import HarnessError

T = TypeVar("T")


class UnknownName(HarnessError, ValueError):
    """A name no implementation is registered under (a ValueError too, for library callers)."""


class Registry(dict[str, T]):
    def __init__(self, what: str, *, key_path: str | None = None) -> None:
        super().__init__()
        self.what = what  # "advantage estimator", ... (for messages)
        self.key_path = key_path  # the recipe key that names one, when there is one

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` (and ``aliases``)."""
        names = (name, *aliases)
        for n in names:
            if not isinstance(n, str) or not n:
                raise ValueError(f"{self.what} names must be non-empty strings, got {n!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"{self.what} names repeat: {names!r}")

        def deco(obj: T) -> T:
            taken = [n for n in names if n in self]
            if taken:
                raise ValueError(f"{self.what} {taken[0]!r} is already registered")
            for n in names:
                self[n] = obj
            return obj

        return deco

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self))

    def lookup(self, name: str) -> T:
        """The object registered as ``name``; :class:`UnknownName` (one line, listing the valid names) else."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise UnknownName(f"unknown {self.what} {name!r}; valid names: {', '.join(self.names())}",
                              key_path=self.key_path) from None



# Where each kind's names come from (``module:attribute``: a registry, a tuple of names or a function giving them),
# imported only when a name is checked or a schema is generated, so reading a record or a recipe stays light.
# Names are sorted, except for the kinds whose registry order means something (tiers: strictest first).
KINDS = {
    "adv_estimator": "harness.core.algos:ADV_ESTIMATOR_REGISTRY",
    "policy_loss": "harness.core.algos:POLICY_LOSS_REGISTRY",
    "kl": "harness.core.algos:KL_REGISTRY",
    "agg_mode": "harness.core.algos:AGG_MODES",
    "reward": "harness.core.reward:reward_names",
    "task": "harness.core.tasks:task_names",
    "device": "harness.devices:device_names",
    "tier": "harness.judge.tiers:tier_names",
    "check-group": "harness.judge.tiers:check_group_names",
    "certifiable-tier": "harness.judge.tiers:certifiable_tier_names",
}
ORDERED_KINDS = ("tier", "check-group", "certifiable-tier")


def kind_names(kind: str) -> list[str]:
    """The names registered for ``kind`` (a key of :data:`KINDS`)."""
    import importlib

    module, attr = KINDS[kind].split(":")
    obj = getattr(importlib.import_module(module), attr)
    names = list(obj.names() if isinstance(obj, Registry) else obj() if callable(obj) else obj)
    return names if kind in ORDERED_KINDS else sorted(names)
