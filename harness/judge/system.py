"""The system under test of a certificate: what the runs' manifests recorded, and whether they agree."""

from __future__ import annotations

from typing import Any

from harness.config.typed_files import Profile
from harness.records.base import dump
from harness.records.certificate import System
from harness.records.run import Manifest


def _kind(manifests: list[Manifest]) -> str:
    if any(m.runtime.image_id for m in manifests):
        return "docker"
    return "torchrun" if any(m.runtime.kind == "torchrun" for m in manifests) else "local"


def derive_system(profile: Profile, manifests: list[Manifest], image: str | None) -> System:
    """The certificate's ``system`` block: the machine, software and runtime the runs' manifests recorded
    (the first run's; :func:`system_disagreements` requires the others to agree), plus the profile's
    vendor, peak, nodes, interconnect and backend. ``image`` is the ``--image`` reference as given."""
    first = manifests[0]
    acc, mach, rt = profile.accelerator, first.machine, first.runtime
    software: dict[str, Any] = {**dump(first.software), "accelerator_driver": mach.driver,
                                "accelerator_runtime": mach.runtime}
    kind = _kind(manifests)
    return System.model_validate({
        "accelerator": {"vendor": acc.vendor, "model": mach.device_model, "count": mach.device_count,
                        "memory_gb": mach.device_memory_gb, "peak_bf16_tflops": acc.peak_bf16_tflops},
        "nodes": profile.nodes,
        "host": {"cpu_cores": mach.cpu_cores, "memory_gb": mach.host_memory_gb, "hostname": mach.hostname},
        "interconnect": profile.interconnect, "collective_backend": profile.collective_backend,
        "software": {k: v for k, v in software.items() if v is None or isinstance(v, (str, int))},
        "runtime": {"kind": kind, "image": image if kind == "docker" else None, "image_id": rt.image_id,
                    "lock_sha256": rt.lock_sha256},
    })


def system_disagreements(manifests: list[tuple[str, Manifest]]) -> list[str]:
    """Runs whose recorded machine, software or container differ from the first run's."""
    def key(m: Manifest) -> tuple[Any, ...]:
        return m.machine, m.software, m.runtime.image_id, m.runtime.lock_sha256

    (first_name, first), out = manifests[0], []
    for name, m in manifests[1:]:
        for label, a, b in zip(("machine", "software", "image id", "lock"), key(first), key(m)):
            if a != b:
                out.append(f"{name} recorded another {label} than {first_name}")
    return out
