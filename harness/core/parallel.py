"""Data parallelism on PyTorch's own engine: torch.distributed + FSDP2 (``fully_shard``) + DeviceMesh.

- Backends: gloo (cpu), nccl (cuda), hccl (npu); every collective has a timeout, so a dead rank
  fails the job instead of hanging it.
- Sharding follows the recipe: ``fsdp_size`` −1 (or ≥ world) = full shard over all ranks, else
  HSDP (replicate × shard mesh). Decoder layers and vision blocks (the model's
  ``_no_split_modules``) are FSDP units, the root holds embeddings and the head.
- Offload: FSDP2's ``CPUOffloadPolicy`` keeps parameters, gradients and optimizer state on the
  host (FSDP2 offers no optimizer-only offload, so either offload flag turns it on).
- Gradients: FSDP2 averages over ranks, while the harness's losses are *sums* over ranks (their
  denominators are global counts). The backward is therefore scaled by the world size.
- Rollouts are data-parallel by prompt: a rank holds whole groups, so advantages need no gather.
- A rollout gathers once: every unit is all-gathered before the rollout and kept whole until it ends
  (:func:`harness.core.gather.gathered`, its forward hooks detached meanwhile), so its decode steps run
  without collectives, at one device's speed, through the CUDA-graph engine on CUDA; when the whole model
  is over half the device's memory the units are gathered layer by layer for every forward instead (:func:`harness.core.gather.gather_once`), with a notice in the manifest.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from harness.core.model_builder import BuiltModules
from harness.core.trainer import Dist
from harness.core.typed_recipe import Recipe
from harness.devices import DEVICE_KINDS


def collective_timeout_s() -> float:
    return float(os.environ.get("HARNESS_COLLECTIVE_TIMEOUT_S", "300"))


def init_distributed(device_type: str, backend: str | None = None) -> Dist:
    """Join the torchrun job (env:// rendezvous) with ``backend`` (the hardware profile's
    ``collective_backend``; by default the device type's) and return this rank's :class:`Dist`."""
    backend = backend or DEVICE_KINDS.lookup(device_type).backend
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=_dt.timedelta(seconds=collective_timeout_s()))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = _collective_device(device_type)

    def all_reduce(t: torch.Tensor) -> torch.Tensor:
        out = t.detach().to(device).clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(t.device)

    def all_gather_objects(obj: Any) -> list[Any]:
        out: list[Any] = [None] * world
        dist.all_gather_object(out, obj)
        return out

    def barrier(timeout_s: float) -> None:
        group = dist.new_group(backend="gloo", timeout=_dt.timedelta(seconds=timeout_s))  # a CPU group: any device
        try:
            dist.barrier(group=group)
        finally:
            dist.destroy_process_group(group)

    return Dist(rank=rank, world=world, all_reduce=all_reduce, all_gather_objects=all_gather_objects,
                barrier=barrier)


def distributed(cfg: Recipe, backend: str | None = None) -> Dist:
    """Join the job and attach FSDP2 sharding (gradients averaged by FSDP → backward × world)."""
    d = init_distributed(cfg.trainer.device, backend)
    return replace(d, wrap=fsdp_wrapper(cfg, d.world), grad_scale=float(d.world))


def _collective_device(device_type: str) -> torch.device:
    if device_type == "cpu":
        return torch.device("cpu")
    return torch.device(device_type, int(os.environ.get("LOCAL_RANK", "0")))


def _mesh(device_type: str, world: int, fsdp_size: int) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    if fsdp_size in (-1, 0) or fsdp_size >= world:
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    return init_device_mesh(device_type, (world // fsdp_size, fsdp_size), mesh_dim_names=("replicate", "shard"))


def shard_model(model: torch.nn.Module, mesh: Any, offload: bool) -> torch.nn.Module:
    """Apply ``fully_shard`` to every layer class in ``_no_split_modules``, then to the root."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    kw: dict[str, Any] = {"mesh": mesh}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    unit_names = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in unit_names:
            fully_shard(module, **kw)
    fully_shard(model, **kw)
    return model


def fsdp_wrapper(cfg: Recipe, world: int, mesh_device: str | None = None) -> Any:
    """A ``model_wrapper`` for :class:`GRPOTrainer` that shards actor and reference (over a mesh of
    ``mesh_device``, default the recipe's device; ``harness plan`` shards over fake ranks on "cpu")."""
    device_type = mesh_device or cfg.trainer.device
    engine = cfg.actor_rollout_ref.actor.veomni
    offload_actor = bool(engine.param_offload or engine.optimizer_offload)
    offload_ref = bool(cfg.actor_rollout_ref.ref.param_offload)

    def wrap(built: BuiltModules) -> BuiltModules:
        mesh = _mesh(device_type, world, int(engine.fsdp_size))
        actor = shard_model(built.actor, mesh, offload_actor)
        ref = shard_model(built.ref, mesh, offload_ref) if built.ref is not None else None
        notes = built.notes + (f"FSDP2 over {world} ranks (mesh {tuple(mesh.shape)}), offload actor={offload_actor} "
                               f"ref={offload_ref}",)
        return replace(built, actor=actor, ref=ref, notes=notes)

    return wrap


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
