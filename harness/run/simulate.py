"""``--simulate``: an accelerator profile's layout executed on this machine's CPU.

A vendor's node (8 GPUs, 16 NPUs, two nodes of 8) is run as ``nnodes × devices per node`` CPU processes
joined by gloo: the same torchrun rendezvous (two nodes = two launchers on localhost), the same sharding
(full shard, or HSDP by ``fsdp_size``), the profile's batch sizes, micro-batches, dtype and offload, and the
recipe's own scale. What cannot run on a CPU is substituted, and the manifest's ``simulated`` block lists it:
the device (cpu for the profile's), the collective backend (gloo for nccl / hccl), and an attention kernel the
CPU lacks (sdpa for flash_attention_2). The devices' memory stays the profile's, so the rollout's gathering
decides as on the node (:func:`harness.core.gather.gather_once`).

A simulated run proves the layout executes and trains what one process trains; it measures nothing about the
hardware: its throughput and memory are the CPU's, and its certificate says so.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from harness.config.recipe import Resolved
from harness.errors import HarnessError

CPU_KERNELS = {"flash_attention_2": "sdpa", "flash_attention_3": "sdpa"}  # what a CPU rank runs instead
SIMULATE_FIX = "drop --simulate: the cpu profile runs its processes for real (--runtime torchrun --nproc-per-node N)"


def simulated(res: Resolved, nnodes: int | None = None) -> Resolved:
    """``res`` as CPU ranks run it (``nnodes``: simulate that many nodes of the profile instead of the scale's
    ``trainer.nnodes``); the substitutions go into the resolved config's override notes and ``res.simulation``."""
    hw = res.hardware
    if hw.device_type == "cpu":
        raise HarnessError("--simulate stands CPU processes in for an accelerator profile's devices; this profile's "
                           "devices are CPUs already", key_path="--simulate", fix=SIMULATE_FIX)
    if nnodes is not None and nnodes < 1:
        raise HarnessError(f"--nnodes must be >= 1, got {nnodes}", key_path="--nnodes", fix="give a node count")
    cfg = copy.deepcopy(res.config)
    trainer = cfg["trainer"]
    nodes = int(nnodes or trainer["nnodes"])
    per_node = int(trainer["n_gpus_per_node"])
    notes: list[dict[str, Any]] = []

    def substitute(section: dict[str, Any], key: str, value: Any, dotted: str, why: str) -> None:
        if section.get(key) != value:
            notes.append({"key": dotted, "value": value, "source": f"--simulate ({why}; the profile: {section.get(key)!r})"})
            section[key] = value

    substitute(trainer, "device", "cpu", "trainer.device", "CPU processes stand in for the devices")
    if nodes != trainer["nnodes"]:
        substitute(trainer, "nnodes", nodes, "trainer.nnodes", "--nnodes")
    for section, dotted in ((cfg["model"], "model"), (cfg["actor_rollout_ref"]["actor"]["veomni"],
                                                       "actor_rollout_ref.actor.veomni")):
        kernel = section.get("attn_implementation")
        if kernel in CPU_KERNELS:
            substitute(section, "attn_implementation", CPU_KERNELS[kernel], f"{dotted}.attn_implementation",
                       "no such kernel on a CPU")
    fsdp = int(cfg["actor_rollout_ref"]["actor"]["veomni"].get("fsdp_size", -1))
    world = nodes * per_node
    layout = {
        "profile_device": hw.device_type, "device": "cpu", "nnodes": nodes, "devices_per_node": per_node,
        "world_size": world, "backend": "gloo", "profile_backend": hw.collective_backend,
        "sharding": "full shard" if fsdp in (-1, 0) or fsdp >= world else f"HSDP {world // fsdp} x {fsdp}",
        "substitutions": [f"{n['key']}={n['value']}" for n in notes],
    }
    profile = {**res.profile, "collective_backend": "gloo"}
    out = replace(res, config=cfg, profile=profile, overrides=[*res.overrides, *notes], simulation=layout)
    out.spec  # noqa: B018 - the substituted config must still be a valid recipe (one line if not)
    return out
