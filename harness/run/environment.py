"""What a run ran on, and what changed between a baseline and a run.

``summary(manifest)`` is the part of a run manifest that decides bitwise comparability (a
baseline stores its primary run's). ``changes(run, ref)`` lists every difference — package
versions, image / lock, device model, driver and CUDA / CANN runtime, thread count, numerics
settings, harness revision — each marked whether it rules out the ``exact`` tier. Every verdict
prints the list, so a FAIL after an upgrade shows the upgrade.

On CPU the numerics pin (:mod:`harness.numerics`, which includes the CPU's vendor and widest ISA)
replaces the CPU model in the exactness test: two pinned runs on CPUs of one ISA class do the same
arithmetic in the same order, so their bits are comparable whatever the model; the model is still
listed as a change.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from harness.numerics import THREAD_VARIABLES, exactness_key

SOFTWARE_KEYS = ("python", "torch", "transformers", "tokenizers", "numpy", "cuda", "cudnn", "torch_npu")


@dataclass(frozen=True)
class Change:
    key: str
    run: Any
    ref: Any
    blocks_exact: bool

    def text(self) -> str:
        return f"{self.key} {self.ref} -> {self.run}"


def summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The environment block of a baseline / the comparable part of a run manifest."""
    sw, mach, rt = manifest["software"], manifest["machine"], manifest["runtime"]
    arch = platform.machine() or "unknown"
    return {
        "deterministic": manifest["deterministic"],
        "software": {k: sw.get(k) for k in SOFTWARE_KEYS + ("threads", "cpu_capability")},
        "machine": {"arch": arch, "device_type": mach["device_type"], "device_model": mach["device_model"],
                    "device_count": mach["device_count"], "cpu_model": mach.get("cpu_model") or "",
                    "driver": mach.get("driver"), "runtime": mach.get("runtime")},
        "runtime": {"kind": rt["kind"], "world_size": rt["world_size"], "image_id": rt["image_id"],
                    "lock_sha256": rt["lock_sha256"]},
        "numerics": exactness_key(manifest.get("numerics")),
        "harness": dict(manifest["harness"]),
    }


def changes(run: dict[str, Any], ref: dict[str, Any]) -> list[Change]:
    """Every difference between two environment summaries (run vs reference), blocking ones first."""
    out: list[Change] = []
    cpu = run["machine"]["device_type"] == "cpu" and ref["machine"]["device_type"] == "cpu"
    pinned = cpu and run.get("numerics") is not None and run.get("numerics") == ref.get("numerics")
    if not (run["deterministic"] and ref["deterministic"]):
        out.append(Change("deterministic mode (exact needs it on both sides)", run["deterministic"],
                          ref["deterministic"], True))
    for key in ref["software"]:
        if run["software"].get(key) != ref["software"][key]:
            out.append(Change(key, run["software"].get(key), ref["software"][key], True))
    if run.get("numerics") != ref.get("numerics"):
        out.append(Change("numerics pin", _pin_text(run.get("numerics")), _pin_text(ref.get("numerics")), cpu))
    for key in ("device_type", "device_count", "device_model", "driver", "runtime"):
        a, b = run["machine"].get(key), ref["machine"].get(key)
        if a != b:
            blocks = not (pinned and key == "device_model")
            out.append(Change(key, a, b, blocks))
    if run["machine"].get("cpu_model") != ref["machine"].get("cpu_model") and not cpu:
        out.append(Change("cpu_model", run["machine"].get("cpu_model"), ref["machine"].get("cpu_model"), False))
    for key in ("world_size", "image_id", "lock_sha256"):
        if run["runtime"][key] != ref["runtime"][key]:
            out.append(Change(key, run["runtime"][key], ref["runtime"][key], True))
    if run["harness"].get("revision") != ref["harness"].get("revision"):
        out.append(Change("harness revision", _short(run["harness"].get("revision")),
                          _short(ref["harness"].get("revision")), False))
    return sorted(out, key=lambda c: not c.blocks_exact)


def _short(rev: str | None) -> str | None:
    return rev[:12] if rev else rev


def _pin_text(key: dict[str, Any] | None) -> str:
    if not key:
        return "none"
    env = key.get("env") or {}
    libs = ", ".join(f"{k}={v}" for k, v in sorted(env.items()) if k not in THREAD_VARIABLES)
    return f"{key['level']} ({key.get('cpu_capability')}, {key.get('threads')} threads; {libs})"


def live_summary(res: Any, runtime: str, world: int) -> dict[str, Any]:
    """The environment a run started now by this process would record (for choosing its tier up front)."""
    from harness import numerics
    from harness.config.profiles import probe_machine
    from harness.run.record import git_revision, software_versions

    numerics.activate()
    manifest = {"deterministic": res.spec.deterministic, "software": software_versions(),
                "machine": probe_machine().as_dict(), "numerics": numerics.record(),
                "runtime": {"kind": runtime, "world_size": world, "image_id": None, "lock_sha256": None},
                "harness": git_revision()}
    return summary(manifest)
