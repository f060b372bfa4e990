"""The ``ckpt-resume`` check: N steps straight vs N/2 + SIGTERM + resume N/2, compared bitwise.

Both runs are child ``harness run`` processes (:class:`harness.run.runtime.run_args.RunSpec`); the
interrupted one stops itself after its half with ``HARNESS_STOP_AFTER_STEP`` and is continued with
``--resume`` by the rule of :mod:`harness.run.resume`.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from harness.config.recipe import Resolved
from harness.errors import EXIT_FINDINGS, HarnessError
from harness.run.runtime.run_args import RunSpec, set_args


def metric_mismatch(a: list[dict[str, Any]], b: list[dict[str, Any]],
                    skip: tuple[str, ...] = ("timing_s/", "perf/")) -> dict[str, Any] | None:
    """The first difference between two metric logs (bitwise; keys starting with ``skip`` aside)."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b):
            row = (a if i < len(a) else b)[i]
            return {"step": row["step"], "key": "<row>", "straight": "present" if i < len(a) else "missing",
                    "resumed": "present" if i < len(b) else "missing"}
        ra, rb = a[i], b[i]
        for key in sorted(set(ra) | set(rb)):
            if key.startswith(skip):
                continue
            va, vb = ra.get(key, "<missing>"), rb.get(key, "<missing>")
            if json.dumps(va) != json.dumps(vb):
                return {"step": ra.get("step"), "key": key, "straight": va, "resumed": vb}
    return None


def _harness(spec: RunSpec, env: dict[str, str], timeout: float) -> Any:
    from harness.run.runtime.child import harness_run

    return harness_run(spec, env=env, capture_output=True, timeout=timeout)


def checkpoint_bytes(config: dict[str, Any]) -> int | None:
    """Estimated size of one checkpoint: the actor's parameters and AdamW state (None when unknown)."""
    from harness.config.safety.memory import (
        DTYPE_BYTES,
        OPTIMIZER_BYTES_FP32,
        OPTIMIZER_BYTES_MIXED,
        MissingKey,
        count_params,
    )

    try:
        n = count_params(config["model"]["architecture"]).total
    except (MissingKey, KeyError, TypeError):
        return None
    b = DTYPE_BYTES.get(config["model"].get("dtype"), 2)
    return n * (b + (OPTIMIZER_BYTES_FP32 if b == 4 else OPTIMIZER_BYTES_MIXED))


def ckpt_resume_check(res: Resolved, workdir: Path, steps: int, *, nproc: int = 1,
                      timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run ``steps`` straight, then ``steps/2`` + SIGTERM + resume; compare the metrics bitwise.

    The straight run writes no checkpoint (it is never resumed); the other checkpoints every
    ``steps // 2`` steps, unless the recipe's overrides set ``trainer.save_freq`` themselves (``-1``: only
    the checkpoint SIGTERM writes — one checkpoint on disk at a time). When two checkpoints would not
    fit in the free space under ``workdir`` (:func:`checkpoint_bytes`), it is ``-1`` by itself, with a
    notice. Returns ``{"pass", "steps", "first_mismatch", "straight", "resumed", "save_freq"}``.
    """
    from harness.run.rundir import read_metrics

    if steps < 2:
        raise HarnessError(f"ckpt-resume needs at least 2 steps, got {steps}", key_path="--steps",
                           fix="give --steps 2 or more")
    half = steps // 2
    given = [o for o in res.overrides if "source" not in o]
    sets = set_args([o for o in given if o["key"] != "trainer.save_freq"])
    workdir.mkdir(parents=True, exist_ok=True)
    save_freq = next((o["value"] for o in given if o["key"] == "trainer.save_freq"), None)
    if save_freq is None:
        size, free = checkpoint_bytes(res.config), shutil.disk_usage(workdir).free
        save_freq = half
        if size is not None and 2.2 * size > free:
            save_freq = -1
            print(f"notice: two checkpoints of ~{size / 1e9:.0f} GB would not fit in the {free / 1e9:.0f} GB free "
                  f"under {workdir}: the run keeps only the checkpoint SIGTERM writes (trainer.save_freq=-1)",
                  file=sys.stderr)
    sim = res.simulation  # --simulate: the same layout on CPU ranks for all three runs
    ranks = int(sim["world_size"]) if sim else nproc
    spec = RunSpec(str(Path(res.path).resolve()), res.profile_name, res.scale, steps=steps, overrides=sets,
                   stage="train", quiet=True, runtime="torchrun" if ranks > 1 else "local",
                   extra=("--nproc-per-node", str(nproc)) if nproc > 1 and not sim else (),
                   simulate=sim is not None, nnodes=int(sim["nnodes"]) if sim else None)
    saving = spec.with_(overrides=(*sets, f"trainer.save_freq={save_freq}"))
    straight, resumed = workdir / "straight", workdir / "resumed"
    straight_spec = spec.with_(overrides=(*sets, "trainer.save_freq=-1"), out=str(straight))
    for d in (straight, resumed):
        shutil.rmtree(d, ignore_errors=True)

    def must(proc: Any, what: str, codes: tuple[int, ...] = (0,)) -> None:
        if proc.returncode not in codes:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise HarnessError(f"ckpt-resume: the {what} run exited {proc.returncode}: {tail}", file=str(workdir),
                               fix="run the same `harness run` by hand to see why", exit_code=EXIT_FINDINGS)

    must(_harness(straight_spec, {}, timeout_s), "straight")
    must(_harness(saving.with_(out=str(resumed)), {"HARNESS_STOP_AFTER_STEP": str(half)}, timeout_s),
         "interrupted", (128 + int(signal.SIGTERM),))
    must(_harness(saving.with_(resume=str(resumed)), {}, timeout_s), "resumed")
    mismatch = metric_mismatch(read_metrics(straight / "metrics.jsonl"), read_metrics(resumed / "metrics.jsonl"))
    return {"pass": mismatch is None, "steps": steps, "first_mismatch": mismatch, "straight": str(straight),
            "resumed": str(resumed), "save_freq": save_freq}
