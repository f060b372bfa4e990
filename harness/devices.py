"""Device kinds: one row per accelerator family, read by everything that depends on the kind.

A row says how torch names the device, which extension registers it, which ``torch.<module>`` holds
its synchronise / memory / RNG calls, which collective backend its ranks join with, which container
image (``images/<image>/``) runs it and how a container is given the device. The recipe and record
schemas, the torchrun join, the device helpers, checkpoints' RNG state and the container runtime
all read this table, so a new accelerator is a row here, its image under ``images/`` and its hardware
profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.registry import Registry


@dataclass(frozen=True)
class DeviceKind:
    name: str  # torch device type, and the recipe's trainer.device
    backend: str  # torch.distributed backend its ranks join with
    image: str  # images/<image>/ builds the container that runs it
    container: str  # how docker hands a container the device: "none", "nvidia" (toolkit) or "ascend" (davinci nodes)
    module: str | None = None  # torch.<module>: synchronize, memory stats, get/set_rng_state_all (None: the host)
    extension: str | None = None  # the import that registers the device with torch
    install_fix: str = ""  # what to do when torch cannot see it


DEVICE_KINDS: Registry[DeviceKind] = Registry("device kind", key_path="trainer.device")
for _kind in (
    DeviceKind("cpu", backend="gloo", image="cpu", container="none"),
    DeviceKind("cuda", backend="nccl", image="cuda", container="nvidia", module="cuda",
               install_fix="run on a GPU machine or pick the cpu profile (--profile cpu)"),
    DeviceKind("npu", backend="hccl", image="ascend", container="ascend", module="npu", extension="torch_npu",
               install_fix="run inside the ascend image (images/ascend)"),
):
    DEVICE_KINDS.register(_kind.name)(_kind)


def device_names() -> list[str]:
    """Every device kind, in the table's order (the schemas' enum)."""
    return list(DEVICE_KINDS)


def accelerators() -> list[DeviceKind]:
    """The kinds with a ``torch.<module>`` of their own (their RNG state goes into checkpoints)."""
    return [k for k in DEVICE_KINDS.values() if k.module is not None]
