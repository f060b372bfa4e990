"""Baselines: the reference a run is judged against, recorded from N seeded runs.

``baselines/<recipe>/<profile>-<scale>.json`` (schema ``baseline``) holds, for one recipe at one
profile and scale:

- every non-timing metric of the **primary** run (the recipe's own seed) at every step, as exact
  JSON floats (``repr`` round trip) — the reference of the ``exact`` and ``band`` tiers;
- the same metric for each **noise seed** (``seed + k`` via ``--set seed=...``) and the per-step
  std across all seeds (the noise floor the ``band`` tier scales with);
- for convergence metrics, each seed's windowed mean (the distribution the ``statistical`` tier
  tests a run against);
- throughput (a quantile of tokens/s over steady steps, the first ``warmup_steps`` skipped; see
  ``DEFAULT_POLICY``) and peak memory, each with its spread across seeds;
- the tolerance policy, which metric is gated in which tier, and a summary of the primary run's
  manifest (software, machine, runtime, image) that decides exact-tier eligibility.

Recording runs every seed to completion first and writes the file once, atomically, at the end:
a killed ``record-baseline`` never leaves a partial baseline.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.jsonio import file_sha256, write_json_atomic
from harness.judge.series import (  # noqa: F401 - re-exported: the baseline's metric classes and helpers
    ATOL_OVERRIDES,
    BAND_EXCLUDED_PREFIXES,
    BAND_EXCLUDED_SUFFIXES,
    MEMORY_METRIC,
    REPLAY_EXCLUDED_PREFIXES,
    STATISTICAL,
    THROUGHPUT_METRIC,
    TIMING_PREFIXES,
    VAL_REWARD_PREFIX,
    Series,
    SteadySpeed,
    _finite_or_none,
    contended_steps,
    is_timing,
    last_step,
    load_series,
    per_step_scaled,
    quantile,
    reference_speeds,
    rel_spread,
    speed_correlation,
    stat_spec,
    statistical_window,
    steady,
    steady_speed,
    window_mean,
)
from harness.judge.tiers import STATISTICAL as STAT_TIER
from harness.judge.tiers import metric_tiers
from harness.paths import BASELINES_DIR, safe_name
from harness.records.base import dump, read
from harness.records.baseline import (
    BandPolicy,
    Baseline,
    Environment,
    MemoryPolicy,
    PerStepThroughput,
    Policy,
    ReplayPolicy,
    StatisticalPolicy,
    ThroughputPolicy,
    ThroughputRef,
)
from harness.records.common import Runtime
from harness.records.run import Manifest
from harness.run.environment import summary
from harness.run.rundir import is_complete, utc_now
from harness.schema import check

DEFAULT_POLICY = Policy(
    band=BandPolicy(rtol=0.05, atol=1e-8, k_noise=3.0, noise_window=2, failures_per_50_steps=1),
    # the last 20 % of the steps (MLPerf RCP's late window), alpha family-wise over the metrics
    # and the median of candidate_runs runs (the run and other seeds: harness.judge.candidates)
    statistical=StatisticalPolicy(window_fraction=0.2, alpha=0.01, practical_floor=0.05, candidate_runs=3),
    # replay: per step, k x the distance of an fp64 replay from the fp32 baseline (running maximum up to two
    # steps ahead, tiers.EVENT_LEAD: the rounding error any other fp32 implementation also makes), scaled by how
    # much coarser the run's dtype rounds (bf16 vs fp32: 2^16); never below rtol_floor x the metric's RMS or atol (a clip fraction may
    # move by a couple of tokens, ~1/500 of a smoke mini-batch; x coarse_atol_factor in a coarser dtype). Only
    # the first horizon_steps are gated: even teacher-forced, training amplifies a rounding difference step by
    # step, and measured on a GPU (fp32) and an AVX-512 CPU the trajectories stay within 7x and 2x of the fp64
    # distance over 10 steps but separate chaotically after ~12-25 (see baselines/README.md).
    replay=ReplayPolicy(k_noise=20.0, horizon_steps=10, rtol_floor=1e-6,
                        unit_roundoff={"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11,
                                       "bfloat16": 2.0 ** -8},
                        atol={"*": 1e-7, "actor/pg_clipfrac": 0.005, "actor/pg_clipfrac_lower": 0.005},
                        coarse_atol_factor=5.0, failures_per_50_steps=0),
    # quantile 0.9, not the median: on a shared machine (CI runners, the 2-core development box) other
    # processes stretch many steps, and the median measures that contention as much as the code (two
    # back-to-back runs of one recipe: medians 8.3k and 1.5k tok/s, 90th percentiles 11.1k and 10.6k).
    # A slower code path slows every step, the fastest ones included, so the upper quantile still
    # catches it; contention only ever makes steps slower, so it cannot hide one.
    throughput=ThroughputPolicy(metric=THROUGHPUT_METRIC, quantile=0.9, warmup_steps=2, min_tolerance=0.15,
                                max_tolerance=0.2, spread_factor=3.0, refresh_ratio=1.5),
    memory=MemoryPolicy(metric=MEMORY_METRIC, tolerance=0.10),
)


# ----------------------------------------------------------------------------- files
def default_path(recipe: str, profile: str, scale: str, base: Path | None = None) -> Path:
    """``baselines/<recipe>/<profile>-<scale>.json``; each name must be one path component (a name read from a
    run's manifest never leads outside the baselines directory)."""
    for what, name in (("recipe name", recipe), ("profile name", profile), ("scale name", scale)):
        safe_name(name, what=what)
    return (base or BASELINES_DIR) / recipe / f"{profile}-{scale}.json"


def reference_path(recipe: str, profile: str, scale: str, reference_profile: str | None,
                   base: Path | None = None) -> Path:
    """The baseline a run is judged against by default: its profile's own; where there is none, the baseline of
    the profile's ``reference_profile`` (a one-device reference the run replays, across world size and device)."""
    own = default_path(recipe, profile, scale, base)
    if own.is_file() or not reference_profile:
        return own
    other = default_path(recipe, reference_profile, scale, base)
    return other if other.is_file() else own


def write_baseline(path: Path, doc: dict[str, Any]) -> Baseline:
    """A baseline document checked by its schema, read into its model and written from it, atomically."""
    check(doc, "baseline", str(path))
    baseline = Baseline.model_validate(doc)
    write_json_atomic(path, dump(baseline))
    return baseline


def load_baseline(path: Path) -> Baseline:
    """A baseline file, checked by its schema, as its record."""
    return read(path, Baseline, "baseline")


# ----------------------------------------------------------------------------- building
def throughput_reference(env: Environment, all_series: list[dict[str, Series]], policy: ThroughputPolicy, steps: int,
                         runtime: Runtime, manifests: list[Manifest]) -> ThroughputRef:
    """One throughput reference from the seeds' runs: valid only for runs on this device model with this thread count.

    With the runs' machine speed (their manifests' calibration), the median of it is kept so that a
    run on a faster or slower machine of the same model is held to a floor scaled accordingly. Where every run
    sampled its speed before each step (accelerators) and the steps' throughput follows those samples, the reference
    on that scale is kept too (``per_step``; :func:`per_step_reference`).
    """
    value, seed_values, spread = _pooled([v for v in reference_speeds(all_series, policy, steps) if v], policy.quantile)
    speeds = [m.calibration.speed_index for m in manifests if m.calibration]
    speed = statistics.median(speeds) if speeds else None
    sharers = [m.calibration.device_processes if m.calibration else None for m in manifests]
    return ThroughputRef(device_model=env.machine.device_model, threads=env.software.threads, runtime=runtime,
                         value=value, seed_values=seed_values, relative_spread=spread, recorded_utc=utc_now(),
                         speed_index=speed, solo=None if None in sharers else not any(sharers),
                         per_step=per_step_reference(all_series, policy, speed) if speed else None)


def _pooled(per_run: list[list[float]], q: float) -> tuple[float, list[float], float]:
    """(the quantile ``q`` over all runs' values, each run's, their relative spread)."""
    seed_values = [quantile(v, q) for v in per_run]
    return quantile([v for vals in per_run for v in vals], q), seed_values, rel_spread(seed_values)


# The median over the seeds of each run's correlation between a steady step's throughput and the calibration sample
# before it, from which the samples are taken to follow the throughput. Measured on one H200 (2026-12-05, the
# qwen3_vl_30b smoke, 15 runs of 40 steps): 0.46 to 0.84, every run; a device-bound run's throughput does not move
# with the host's speed (r near 0; over 38 steps the spread of r under no relation is ~0.16, of a 5-seed median ~0.07).
FOLLOWS_MIN = 0.3


def per_step_reference(all_series: list[dict[str, Series]], policy: ThroughputPolicy,
                       speed: float) -> PerStepThroughput | None:
    """The seeds' throughput with each steady step scaled to ``speed`` by its own calibration sample, kept only when
    every run has the samples and its steps' throughput follows them (the median of the runs' correlations at least
    :data:`FOLLOWS_MIN`: the calibration explains the host's moment-to-moment speed; for a run bound by the device,
    scaling would only add the samples' noise). Whether the seeds' spread narrows when scaled is not the test: five
    seeds recorded on a quiet host have little spread to narrow, and a verdict on a busy host needs the scale."""
    scaled = [per_step_scaled(s, policy.metric, policy.warmup_steps, speed) for s in all_series]
    if len(scaled) < 2 or any(v is None for v in scaled):
        return None
    follows = [speed_correlation(s, policy.metric, policy.warmup_steps) for s in all_series]
    if any(r is None for r in follows) or statistics.median(r for r in follows if r is not None) < FOLLOWS_MIN:
        return None
    value, seed_values, spread = _pooled([v for v in scaled if v is not None], policy.quantile)
    return PerStepThroughput(value=value, seed_values=seed_values, relative_spread=spread)


def refuse_shared_device(manifests: list[Manifest], run_dirs: list[Path]) -> None:
    """A throughput reference is never recorded from a run that shared its accelerator with another process."""
    for m, d in zip(manifests, run_dirs):
        n = m.calibration.device_processes if m.calibration else None
        if n:
            raise HarnessError(f"{n} other process(es) held the {m.machine.device_model} when this run started: its "
                               "throughput is not a solo run's", file=str(d / "manifest.json"),
                               fix="record again when nothing else runs on the device (nvidia-smi shows none)")


def metric_entries(all_series: list[dict[str, Series]], steps: int, policy: Policy, primary: str, *,
                   allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The baseline's ``metrics``: per gated metric the primary run's values (the first series), the others' as
    noise, the per-step std and, for a statistical metric, each run's window mean. ``allowed`` keeps only those
    tiers (a metric left with none is not recorded)."""
    metrics: dict[str, Any] = {}
    stat_w = statistical_window(policy.statistical.window_fraction, steps)
    for name in sorted(all_series[0]):
        tiers = [t for t in metric_tiers(name) if allowed is None or t in allowed]
        if not tiers:
            continue
        ref = all_series[0][name]
        ks = sorted(ref)
        for k in ks:
            if not math.isfinite(ref[k]):
                raise HarnessError(f"the primary run has a non-finite {name} at step {k}", file=primary,
                                   fix="a baseline must come from a healthy run; fix the recipe first")
        noise = [[_finite_or_none(s.get(name, {}).get(k)) for k in ks] for s in all_series[1:]]
        std = []
        for i, k in enumerate(ks):
            vals = [ref[k]] + [x for row in noise if (x := row[i]) is not None]
            std.append(statistics.stdev(vals) if len(vals) > 1 else 0.0)
        entry: dict[str, Any] = {"tiers": tiers, "steps": ks, "values": [ref[k] for k in ks],
                                 "noise_values": noise, "noise_std": std}
        if name in ATOL_OVERRIDES:
            entry["atol"] = ATOL_OVERRIDES[name]
        spec = stat_spec(name)
        if spec and STAT_TIER.name in tiers:
            entry["direction"], entry["transform"] = spec[0], spec[1]
            if spec[2] is not None:
                entry["stat_floor"] = spec[2]
            means = [window_mean(s.get(name, {}), steps, stat_w) for s in all_series]
            entry["seed_window_means"] = [m for m in means if m is not None]
        metrics[name] = entry
    return metrics


def build_baseline(run_dirs: list[Path], *, command: str, policy: Policy | None = None) -> dict[str, Any]:
    """A baseline document from finished runs of one recipe/profile/scale (primary seed first)."""
    policy = policy or DEFAULT_POLICY
    manifests = [read(d / "manifest.json", Manifest, "manifest") for d in run_dirs]
    for d in run_dirs:
        if not is_complete(d):
            raise HarnessError("run did not complete; a baseline needs finished runs", file=str(d),
                               fix="re-run record-baseline")
    prim = manifests[0]
    for d, m in zip(run_dirs[1:], manifests[1:]):
        same = (m.recipe.hash, m.profile, m.scale, m.steps.completed)
        if same != (prim.recipe.hash, prim.profile, prim.scale, prim.steps.completed):
            raise HarnessError("noise-seed run differs from the primary run in recipe, profile, scale or steps",
                               file=str(d), fix="record all seeds with the same command")
    if prim.overrides:
        raise HarnessError("the primary run has overrides; a baseline is recorded for the recipe as published",
                           file=str(run_dirs[0]), fix="record without --set")
    if any(m.fault_injection for m in manifests):
        raise HarnessError("a run was recorded with HARNESS_FAULT set; refusing to use it as a baseline",
                           key_path="HARNESS_FAULT", fix="unset HARNESS_FAULT and record again")
    all_series = [load_series(d) for d in run_dirs]
    steps = prim.steps.completed
    metrics = metric_entries(all_series, steps, policy, str(run_dirs[0]))
    tp, mem = policy.throughput, policy.memory
    env = summary(prim)
    mem_peaks = [max(s[mem.metric].values()) for s in all_series if s.get(mem.metric)]
    ws = prim.warm_start
    warm = {"warm_start": {"key": ws.key, "weights_sha256": ws.weights_sha256}} if ws and ws.weights_sha256 else {}
    return {
        "schema_version": 2,
        "recipe": {"name": prim.recipe.name, "hash": prim.recipe.hash, "config_hash": prim.recipe.config_hash},
        "profile": prim.profile, "scale": prim.scale,
        "architecture": prim.architecture, "dtype": prim.dtype,
        "steps": steps, "created_utc": utc_now(), "command": command,
        "primary_seed": prim.seed, "noise_seeds": [m.seed for m in manifests[1:]],
        "environment": dump(env),
        "policy": dump(policy),
        "metrics": metrics,
        "throughput": {"references": [dump(throughput_reference(env, all_series, tp, steps, prim.runtime.kind,
                                                                manifests))]},
        "memory": {"value": statistics.median(mem_peaks) if mem_peaks else 0.0, "seed_values": mem_peaks,
                   "relative_spread": rel_spread(mem_peaks)},
        "runs": [{"seed": m.seed, "run_dir": str(d), "metrics_sha256": file_sha256(d / "metrics.jsonl")}
                 for d, m in zip(run_dirs, manifests)],
        **warm,
    }
