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
from typing import Any

from harness.numerics import THREAD_VARIABLES, exactness_key
from harness.records.baseline import Environment, LaunchSummary, MachineSummary
from harness.records.common import HarnessSource, Runtime, Software
from harness.records.run import Launch, Machine, Manifest, Numerics
from harness.records.verdict import Change

SOFTWARE_KEYS = ("python", "torch", "transformers", "tokenizers", "numpy", "cuda", "cudnn", "torch_npu")


def change_text(c: Change) -> str:
    return f"{c.key} {c.baseline} -> {c.run}"


def _summary(deterministic: bool, software: Software, machine: Machine, launch: Launch, numerics: Numerics | None,
             harness: HarnessSource) -> Environment:
    return Environment(
        deterministic=deterministic, software=software,
        machine=MachineSummary(arch=platform.machine() or "unknown", device_type=machine.device_type,
                               device_model=machine.device_model, device_count=machine.device_count,
                               cpu_model=machine.cpu_model or "", driver=machine.driver, runtime=machine.runtime),
        runtime=LaunchSummary(kind=launch.kind, world_size=launch.world_size, image_id=launch.image_id,
                              lock_sha256=launch.lock_sha256),
        numerics=exactness_key(numerics.model_dump() if numerics else None), harness=harness)


def summary(manifest: Manifest) -> Environment:
    """The environment block of a baseline / the comparable part of a run manifest."""
    return _summary(manifest.deterministic, manifest.software, manifest.machine, manifest.runtime, manifest.numerics,
                    manifest.harness)


def changes(run: Environment, ref: Environment) -> list[Change]:
    """Every difference between two environment summaries (run vs reference), blocking ones first."""
    out: list[Change] = []

    def add(key: str, run_value: Any, ref_value: Any, blocks: bool) -> None:
        out.append(Change(key=key, baseline=ref_value, run=run_value, blocks_exact=blocks))

    cpu = run.machine.device_type == "cpu" and ref.machine.device_type == "cpu"
    pinned = cpu and run.numerics is not None and run.numerics == ref.numerics
    if not (run.deterministic and ref.deterministic):
        add("deterministic mode (exact needs it on both sides)", run.deterministic, ref.deterministic, True)
    ref_sw, run_sw = ref.software.model_dump(), run.software.model_dump()
    for key in ref_sw:
        if run_sw.get(key) != ref_sw[key]:
            add(key, run_sw.get(key), ref_sw[key], True)
    if run.numerics != ref.numerics:
        add("numerics pin", _pin_text(run.numerics), _pin_text(ref.numerics), cpu)
    ref_m, run_m = ref.machine.model_dump(), run.machine.model_dump()
    for key in ("device_type", "device_count", "device_model", "driver", "runtime"):
        if run_m[key] != ref_m[key]:
            add(key, run_m[key], ref_m[key], not (pinned and key == "device_model"))
    if run.machine.cpu_model != ref.machine.cpu_model and not cpu:
        add("cpu_model", run.machine.cpu_model, ref.machine.cpu_model, False)
    ref_l, run_l = ref.runtime.model_dump(), run.runtime.model_dump()
    for key in ("world_size", "image_id", "lock_sha256"):
        if run_l[key] != ref_l[key]:
            add(key, run_l[key], ref_l[key], True)
    if run.harness.revision != ref.harness.revision:
        add("harness revision", _short(run.harness.revision), _short(ref.harness.revision), False)
    return sorted(out, key=lambda c: not c.blocks_exact)


def _short(rev: str | None) -> str | None:
    return rev[:12] if rev else rev


def _pin_text(key: dict[str, Any] | None) -> str:
    if not key:
        return "none"
    env = key.get("env") or {}
    libs = ", ".join(f"{k}={v}" for k, v in sorted(env.items()) if k not in THREAD_VARIABLES)
    return f"{key['level']} ({key.get('cpu_capability')}, {key.get('threads')} threads; {libs})"


def live_summary(res: Any, runtime: Runtime, world: int) -> Environment:
    """The environment a run started now by this process would record (for choosing its tier up front)."""
    from harness import __version__, numerics
    from harness.config.profiles import probe_machine
    from harness.run.rundir import git_revision, software_versions

    numerics.activate()
    pin = numerics.record()
    return _summary(res.spec.deterministic, Software.model_validate(software_versions()), probe_machine(),
                    Launch(kind=runtime, world_size=world, nnodes=1, image_id=None, lock_sha256=None),
                    Numerics.model_validate(pin) if pin else None,
                    HarnessSource.model_validate({"version": __version__, **git_revision()}))
