"""What a traced step holds and sends: live bytes by category, per phase, and the collectives it issues.

:class:`Tracker` is a ``TorchDispatchMode`` entered inside a ``FakeTensorMode``: every op the step runs
passes through it with fake tensors (shapes, dtypes and storages, no data). It counts each output
storage once, from its allocation until it is freed (a weak reference on the storage), so ``total``
is what a caching allocator's ``memory_allocated`` would report, without its 512-byte rounding.

Categories. A storage is counted as the current *context* at its allocation (``activations`` in the
forwards and backwards, ``optimizer`` inside the optimizer's step) unless the tracer retags it:
parameters (the shards, the reference's, and FSDP's all-gathered copies), gradients (the
reduce-scatter's output, or what autograd accumulated), the KV cache (what a cache layer holds
after an update). With offload, the sharded state is the host's: it is counted apart and never in
the device's total.

Integers for real. Token ids, masks, positions and indices built from real integers (the prompts the
tracer makes) are computed for real when small (:data:`REAL_LIMIT`): the multimodal RoPE index and
the masks read their values. Anything computed from a fake tensor stays fake.

Data-dependent indices. What a top-k, sort, arg-max or sampler picks from fake data gets real placeholder
indices spread evenly over the dimension it indexes: a MoE router's choice is balanced (every expert gets its
share of the tokens), and the eager experts' loop over the experts hit runs as it would on real data.

Data-dependent scalars. A fake tensor has no value, so ``.item()`` (the loss metrics, the gradient
norm, AdamW's step count) cannot be read. The tracker answers each such read with a placeholder one
(of the tensor's type) and counts it: what the step computes from them (metrics, a finite check, the
bias correction) changes no shape and allocates nothing, so the trace is unchanged by the value.

Collectives: every c10d op, by kind, with the bytes it moves per rank (all-gather: the gathered
output; reduce-scatter: its input; all-reduce and broadcast: the tensor).
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "kv_cache")
HOST = "host:"  # prefix of a category kept on the host (offloaded state)
SNAPSHOT_STEP = 1e-3  # a breakdown is re-taken when the peak grows by more than this fraction


@dataclass
class PhasePeak:
    """The device's peak over one phase and what it held at that moment (bytes per category)."""

    peak_bytes: int = 0
    breakdown: dict[str, int] = field(default_factory=dict)
    start_bytes: int = 0


@dataclass
class Collective:
    kind: str
    count: int = 0
    bytes: int = 0


def _kind(func: Any) -> str | None:
    """all_gather, reduce_scatter, all_reduce, broadcast, … for a c10d op; None for any other op."""
    ns = getattr(func, "namespace", "")
    if ns not in ("c10d", "_c10d_functional"):
        return None
    name = func._schema.name.split("::")[-1].rstrip("_")  # noqa: SLF001 - the op's schema name
    for key, kind in (("allgather", "all_gather"), ("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"),
                      ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("broadcast", "broadcast"),
                      ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("barrier", "barrier")):
        if key in name:
            return kind
    return name


def _tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or result (lists, tuples, return-type tuples, dicts), in order: what
    ``tree_flatten`` finds there, walked directly (a full-scale plan dispatches ~200,000 ops, three walks each).
    No closure and no reference cycle: the list must die with its last user, or the tensors in it would outlive
    their frees (the tracker sees a free when a tensor's last reference goes)."""
    out: list[torch.Tensor] = []
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            out.append(o)
        elif isinstance(o, (list, tuple)):
            stack.extend(reversed(o))
        elif isinstance(o, dict):
            stack.extend(reversed(list(o.values())))
    return out


REAL_LIMIT = 1 << 22  # elements: integer results up to this size are computed for real


def _real(t: torch.Tensor) -> bool:
    """A plain tensor with data (not fake, not a DTensor, not meta)."""
    return type(t) is torch.Tensor and t.device.type != "meta"


def _small_integers(out: Any) -> bool:
    """Integer or boolean tensors only, of :data:`REAL_LIMIT` elements at most (or a Python scalar)."""
    ts = _tensors(out)
    return all(not (t.is_floating_point() or t.is_complex()) for t in ts) and \
        sum(t.numel() for t in ts) <= REAL_LIMIT


@functools.cache
def _index_ops() -> frozenset[Any]:
    """Ops whose integer result indexes their input's last dimension: given placeholder indices on fake data."""
    a = torch.ops.aten
    return frozenset({a.topk.default, a.sort.default, a.sort.stable, a.argsort.default, a.argsort.stable,
                      a.argmax.default, a.argmin.default, a.max.dim, a.min.dim, a.multinomial.default})


def _placeholder(t: torch.Tensor) -> bool | int | float:
    if t.dtype == torch.bool:
        return True
    return 1 if not (t.is_floating_point() or t.is_complex()) else 1.0


class Tracker(TorchDispatchMode):
    """Live bytes by category and phase, collectives by kind, placeholder scalars (module docstring)."""

    def __init__(self, *, offload: bool = False) -> None:
        super().__init__()
        self.offload = offload
        self.live: dict[int, tuple[int, str]] = {}  # storage key -> (bytes, category)
        self.by_category: Counter[str] = Counter()
        self.total = 0  # device bytes (host categories excluded)
        self.context = "activations"
        self.phase: str | None = None
        self.phases: dict[str, PhasePeak] = {}
        self.collectives: dict[tuple[str, str], Collective] = {}  # (phase, kind) -> counts
        self.placeholder_reads = 0

    # ------------------------------------------------------------------ storages
    @staticmethod
    def _storage(t: torch.Tensor) -> Any:
        local = getattr(t, "_local_tensor", None)  # a DTensor: its shard
        return (local if local is not None else t).untyped_storage()

    def _device(self, category: str) -> bool:
        return not category.startswith(HOST)

    def track(self, t: torch.Tensor, category: str | None = None) -> None:
        """Count ``t``'s storage (once) as ``category`` (default: the current context); a tracked one is retagged."""
        st = self._storage(t)
        key = st._cdata  # noqa: SLF001 - the storage's identity
        cat = category or self.context
        if key in self.live:
            if category is not None:
                self._retag(key, cat)
            return
        n = int(st.nbytes())
        self.live[key] = (n, cat)
        self._add(cat, n)
        weakref.finalize(st, self._free, key)

    def retag(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        for t in tensors:
            self.track(t, category)

    def state_category(self, category: str, offloaded: bool) -> str:
        """``category`` on the host when ``offloaded`` (the sharded state under an offload policy)."""
        return HOST + category if offloaded else category

    def _retag(self, key: int, category: str) -> None:
        n, old = self.live[key]
        if old == category:
            return
        self._add(old, -n)
        self.live[key] = (n, category)
        self._add(category, n)

    def _add(self, category: str, n: int) -> None:
        self.by_category[category] += n
        if self._device(category):
            self.total += n
            if n > 0:
                self._peak()

    def resized(self, storage: Any, nbytes: int) -> None:
        """``storage`` resized in place to ``nbytes`` (FSDP2 frees and refills its unsharded parameters so)."""
        key = storage._cdata  # noqa: SLF001
        entry = self.live.get(key)
        if entry is None:
            return
        self._add(entry[1], -entry[0])
        self.live[key] = (nbytes, "parameters")
        self._add("parameters", nbytes)

    @contextmanager
    def watching_resizes(self) -> Iterator[None]:
        """Count storages resized in place (``UntypedStorage.resize_``, which no dispatch mode sees)."""
        orig = torch.UntypedStorage.resize_
        tracker = self

        def resize_(storage: Any, nbytes: int) -> Any:
            out = orig(storage, nbytes)
            tracker.resized(storage, int(nbytes))
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            torch.UntypedStorage.resize_ = orig  # type: ignore[method-assign]

    def _free(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self._add(entry[1], -entry[0])

    def _peak(self) -> None:
        if self.phase is None:
            return
        p = self.phases[self.phase]
        if self.total > p.peak_bytes:
            grew = self.total > p.peak_bytes * (1 + SNAPSHOT_STEP)
            p.peak_bytes = self.total
            if grew or not p.breakdown:
                p.breakdown = {k: v for k, v in self.by_category.items() if v and self._device(k)}

    # ------------------------------------------------------------------ phases
    @contextmanager
    def in_phase(self, name: str) -> Iterator[PhasePeak]:
        """Measure the device's peak from here to the end of the block as phase ``name``."""
        before = self.phase
        p = self._enter(name)
        p.start_bytes = self.total
        p.peak_bytes = max(p.peak_bytes, self.total)
        try:
            yield p
        finally:
            self.phase = before

    def switch(self, name: str, *, context: str = "activations", offloaded: bool = False) -> None:
        """From here on, phase ``name`` (its peak starts at the bytes held now), allocations counted as ``context``."""
        self._enter(name)
        self.context = self.state_category(context, offloaded) if context != "activations" else context

    def _enter(self, name: str) -> PhasePeak:
        """Make ``name`` the current phase; one entered with no breakdown yet starts at the bytes held now."""
        self.phase = name
        p = self.phases.setdefault(name, PhasePeak())
        if not p.breakdown:
            p.start_bytes = self.total
            p.peak_bytes = max(p.peak_bytes, self.total)
            p.breakdown = {k: v for k, v in self.by_category.items() if v and self._device(k)}
        return p

    @contextmanager
    def counting_as(self, context: str) -> Iterator[None]:
        before = self.context
        self.context = context
        try:
            yield
        finally:
            self.context = before

    def host_bytes(self) -> int:
        return sum(v for k, v in self.by_category.items() if not self._device(k))

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        ins = _tensors(args) + _tensors(kwargs)
        if func is torch.ops.aten._local_scalar_dense.default and not _real(args[0]):  # noqa: SLF001 - .item()
            self.placeholder_reads += 1
            return _placeholder(args[0])
        out = self._real_integers(func, args, kwargs, ins)
        if out is None:
            out = func(*args, **kwargs)
            if func in _index_ops():
                out = self._placeholder_indices(out, args[0])
        kind = _kind(func)
        if kind is not None:
            self._collective(kind, func, args, kwargs, out)
        for t in _tensors(out):
            if t.device.type != "meta":
                self.track(t)
        return out

    @staticmethod
    def _real_integers(func: Any, args: Any, kwargs: Any, ins: list[torch.Tensor]) -> Any:
        """The op computed for real when its inputs are real integers and so is its (small) result; else None."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        if not all(_real(t) for t in ins) or sum(t.numel() for t in ins) > REAL_LIMIT:
            return None
        if not ins:  # a factory: its size and dtype first, from the fake one
            if not _small_integers(func(*args, **kwargs)):
                return None
        elif any(t.is_floating_point() or t.is_complex() for t in ins):
            return None
        with unset_fake_temporarily():
            out = func(*args, **kwargs)
        return out if _small_integers(out) else None

    def _placeholder_indices(self, out: Any, source: torch.Tensor) -> Any:
        """The index result of a top-k, sort, arg-max or sampling op on fake data, as real indices spread evenly
        over the indexed dimension (``arange % n``: each row's top-k distinct, a sort's a permutation); values
        stay fake. A router's choice is then balanced: every expert gets its share of the tokens."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        n = max(1, source.shape[-1] if source.dim() else 1)

        def real(t: Any) -> Any:
            if not isinstance(t, torch.Tensor) or t.is_floating_point() or t.numel() > REAL_LIMIT:
                return t
            self.placeholder_reads += 1
            with unset_fake_temporarily():
                return (torch.arange(t.numel(), dtype=t.dtype) % n).reshape(t.shape)

        return type(out)(real(t) for t in out) if isinstance(out, tuple) else real(out)

    def _collective(self, kind: str, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        ins = _tensors(args) + _tensors(kwargs)
        if not ins:
            return
        if kind == "all_gather":
            moved = max(t.untyped_storage().nbytes() for t in ins)  # the gathered output (the largest argument)
        elif kind == "reduce_scatter":
            moved = max(t.nbytes for t in ins)
        else:
            moved = sum(t.nbytes for t in ins)
        c = self.collectives.setdefault((self.phase or "setup", kind), Collective(kind))
        c.count += 1
        c.bytes += int(moved)
        if kind == "all_gather":  # the unsharded parameters it fills
            self.retag([max(ins, key=lambda t: t.untyped_storage().nbytes())], "parameters")
        elif kind == "reduce_scatter":  # the sharded gradient it writes
            self.retag([min(ins, key=lambda t: t.nbytes)], self.state_category("gradients", self.offload))
