"""Hardware profiles (``recipes/hardware/*.json``) and the live-machine probe.

A profile describes one node type, MLPerf-style: accelerator vendor/model/count/memory,
nodes, interconnect, collective backend, peak bf16 TFLOP/s (for MFU), container image.
``probe_machine`` reads what is really there; ``mismatches`` lists every difference that
would make a run on this machine not a run on that profile.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from harness.errors import HarnessError
from harness.jsonio import load_json_strict
from harness.paths import PROFILES_DIR
from harness.records.run import Machine
from harness.schema import check


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def load_profile(name: str) -> dict[str, Any]:
    path = PROFILES_DIR / f"{name}.json"
    if not path.is_file():
        raise HarnessError(f"unknown hardware profile '{name}'", key_path="--profile",
                           fix=f"use one of {', '.join(profile_names())}")
    data = load_json_strict(path)
    check(data, "profile", str(path))
    if data["name"] != name:
        raise HarnessError(f"profile name '{data['name']}' differs from the file name", file=str(path),
                           key_path="/name", fix=f"set name to '{name}'")
    return data


def _host_memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 0.0


def _nvidia_driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            for tok in fh.readline().split():
                if tok[:1].isdigit() and "." in tok:
                    return tok
    except OSError:
        pass
    return None


def device_processes(device_type: str) -> int | None:
    """Processes holding an accelerator of this machine now (nvidia-smi's compute applications); None on the CPU,
    on other accelerators, or when it cannot be read. Read before this process touches the device, it counts the
    others: a throughput measured beside them is not a solo run's."""
    import subprocess

    if device_type != "cuda":
        return None
    try:
        proc = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return sum(1 for line in proc.stdout.splitlines() if line.strip())


def probe_machine() -> Machine:
    """Read the live machine: accelerators via torch (torch_npu only if it is installed)."""
    import torch

    common: dict[str, Any] = dict(cpu_cores=os.cpu_count() or 1, host_memory_gb=round(_host_memory_gb(), 1),
                  hostname=platform.node(), cpu_model=cpu_model_name())
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        return Machine(device_type="cuda", device_count=torch.cuda.device_count(), device_model=props.name,
                       device_memory_gb=round(props.total_memory / 1e9, 1), driver=_nvidia_driver(),
                       runtime=torch.version.cuda, **common)
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        if torch.npu.is_available() and torch.npu.device_count() > 0:  # type: ignore[attr-defined]
            name = torch.npu.get_device_name(0)  # type: ignore[attr-defined]
            mem = torch.npu.get_device_properties(0).total_memory / 1e9  # type: ignore[attr-defined]
            cann = getattr(getattr(torch_npu, "version", None), "cann", None)
            return Machine(device_type="npu", device_count=torch.npu.device_count(),  # type: ignore[attr-defined]
                           device_model=name, device_memory_gb=round(mem, 1), driver=None, runtime=cann, **common)
    except ImportError:
        pass
    return Machine(device_type="cpu", device_count=1, device_model=common["cpu_model"],
                   device_memory_gb=common["host_memory_gb"], driver=None, runtime=None, **common)


def cpu_model_name() -> str:
    """The host CPU's model name (``model name`` in /proc/cpuinfo), else the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = " ".join(line.split(":", 1)[1].split())
                    if name:
                        return name
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"



def mismatches(profile: dict[str, Any], machine: Machine, *, devices_needed: int | None = None) -> list[str]:
    """Human-readable differences between ``profile`` and ``machine`` (empty = matches).

    ``devices_needed`` (a run's devices per node) may be smaller than the profile's node when a
    smoke run uses part of it; certification passes None and needs the whole node.
    """
    out: list[str] = []
    acc = profile["accelerator"]
    if machine.device_type != profile["device_type"]:
        return [f"device type: profile wants {profile['device_type']}, machine has {machine.device_type}"]
    if profile["device_type"] == "cpu":
        if machine.host_memory_gb and machine.host_memory_gb < acc["memory_gb"] * 0.9:
            out.append(f"host memory: profile wants {acc['memory_gb']} GB, machine has {machine.host_memory_gb} GB")
        return out
    want = acc["count_per_node"] if devices_needed is None else devices_needed
    if machine.device_count < want:
        out.append(f"device count: needs {want} x {acc['model']}, machine has {machine.device_count}")
    if acc["model"].lower() not in machine.device_model.lower():
        out.append(f"device model: profile wants {acc['model']}, machine has {machine.device_model}")
    if machine.device_memory_gb < acc["memory_gb"] * 0.9:
        out.append(f"device memory: profile wants {acc['memory_gb']} GB, machine has {machine.device_memory_gb} GB")
    sw = profile["software"]
    if sw["driver"] and not (machine.driver or "").startswith(sw["driver"]):
        out.append(f"driver: profile wants {sw['driver']}*, machine has {machine.driver}")
    if sw["runtime"] and not (machine.runtime or "").startswith(sw["runtime"]):
        out.append(f"runtime: profile wants {sw['runtime']}*, machine has {machine.runtime}")
    return out


def live_profile_name(machine: Machine | None = None) -> str:
    """The shipped profile that fits this machine best (cpu when no accelerator is found)."""
    machine = machine or probe_machine()
    candidates = []
    for name in profile_names():
        prof = load_profile(name)
        if prof["device_type"] != machine.device_type:
            continue
        if not mismatches(prof, machine):
            candidates.append((prof["accelerator"]["count_per_node"], name))
    if not candidates:
        raise HarnessError(f"no shipped profile matches this machine ({machine.device_count} x {machine.device_model})",
                           key_path="--profile", fix="pass --profile NAME explicitly or add a profile under "
                                                     "recipes/hardware/")
    return max(candidates)[1]
