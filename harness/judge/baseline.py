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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.schema import check, load_checked
from harness.errors import HarnessError
from harness.jsonio import file_sha256, load_json_strict
from harness.paths import BASELINES_DIR, safe_name
from harness.run.cpuload import IDLE_METRIC, OTHERS_METRIC, contended
from harness.run.environment import summary
from harness.run.record import is_complete, read_metrics, utc_now

# Wall-clock dependent metrics: never compared bitwise or in a band (same as harness.core.trainer).
TIMING_PREFIXES = ("timing_s/", "perf/")
THROUGHPUT_METRIC = "perf/throughput"
MEMORY_METRIC = "perf/max_memory_allocated_gb"
# Per-step extremes (order statistics of a batch) and float-noise diagnostics jump between
# seeds and machines: gated bitwise under exact, never in a band.
BAND_EXCLUDED_SUFFIXES = ("/max", "/min")
BAND_EXCLUDED_PREFIXES = ("training/rollout_probs_diff",)
# Convergence metrics of the statistical tier: name -> (direction of a regression, scale, floor).
# One outcome, as MLPerf RCP tests one convergence metric: the training reward's late-window mean, on
# the arcsine-square-root scale of a proportion (harness.judge.stats), one-sided at the policy's alpha.
# Measured (baselines/README.md), and dropped for it:
# - the KL loss, clip fraction and entropy: a false alarm (entropy, seed 1012) and no power — a KL
#   coefficient of 0 or a clip range of 0.5 moves none of them beyond the spread of fresh seeds over
#   40 smoke steps (bench/fault_effects.py: no metric or window separates them, Mann-Whitney p >= 0.06);
# - the validation reward: at smoke scale one or two evaluations of a small held-out set, close to a coin
#   flip between seeds. Over two campaigns it gave 3 of the 4 false alarms (seeds 1011/1014 of the first,
#   1012 of the 2026-12-02 one) and caught nothing the training reward did not. It stays gated bitwise
#   (exact) and in the band, and the MLPerf convergence target uses it.
# Faults below the seeds' spread are the replay tier's to catch.
STATISTICAL: dict[str, tuple[str, str, float | None]] = {
    "critic/score/mean": ("higher-is-better", "asin-sqrt", None),
}
VAL_REWARD_PREFIX = "val-core/"
# Metrics whose ideal value is 0 and whose seed noise is float noise: an absolute floor instead.
ATOL_OVERRIDES = {"critic/advantages/mean": 1e-5}
# Not gated under replay: a replayed rollout has no generation-time log-probs and no validation.
REPLAY_EXCLUDED_PREFIXES = ("training/rollout_probs_diff", VAL_REWARD_PREFIX)

DEFAULT_POLICY: dict[str, Any] = {
    "band": {"rtol": 0.05, "atol": 1e-8, "k_noise": 3.0, "noise_window": 2, "failures_per_50_steps": 1},
    # the last 20 % of the steps (MLPerf RCP's late window), alpha family-wise over the metrics
    # and the median of candidate_runs runs (the run and other seeds: harness.judge.candidates)
    "statistical": {"window_fraction": 0.2, "alpha": 0.01, "practical_floor": 0.05, "candidate_runs": 3},
    # replay: per step, k x the distance of an fp64 replay from the fp32 baseline (running maximum up to two
    # steps ahead, tiers.EVENT_LEAD: the rounding error any other fp32 implementation also makes), scaled by how
    # much coarser the run's dtype rounds (bf16 vs fp32: 2^16); never below rtol_floor x the metric's RMS or atol (a clip fraction may
    # move by a couple of tokens, ~1/500 of a smoke mini-batch; x coarse_atol_factor in a coarser dtype). Only
    # the first horizon_steps are gated: even teacher-forced, training amplifies a rounding difference step by
    # step, and measured on a GPU (fp32) and an AVX-512 CPU the trajectories stay within 7x and 2x of the fp64
    # distance over 10 steps but separate chaotically after ~12-25 (see baselines/README.md).
    "replay": {"k_noise": 20.0, "horizon_steps": 10, "rtol_floor": 1e-6,
               "unit_roundoff": {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11,
                                 "bfloat16": 2.0 ** -8},
               "atol": {"*": 1e-7, "actor/pg_clipfrac": 0.005, "actor/pg_clipfrac_lower": 0.005},
               "coarse_atol_factor": 5.0, "failures_per_50_steps": 0},
    # quantile 0.9, not the median: on a shared machine (CI runners, the 2-core development box) other
    # processes stretch many steps, and the median measures that contention as much as the code (two
    # back-to-back runs of one recipe: medians 8.3k and 1.5k tok/s, 90th percentiles 11.1k and 10.6k).
    # A slower code path slows every step, the fastest ones included, so the upper quantile still
    # catches it; contention only ever makes steps slower, so it cannot hide one.
    "throughput": {"metric": THROUGHPUT_METRIC, "quantile": 0.9, "warmup_steps": 2, "min_tolerance": 0.15,
                   "max_tolerance": 0.2, "spread_factor": 3.0, "refresh_ratio": 1.5},
    "memory": {"metric": MEMORY_METRIC, "tolerance": 0.10},
}


# ----------------------------------------------------------------------------- metric classes
def is_timing(name: str) -> bool:
    return name.startswith(TIMING_PREFIXES)


def stat_spec(name: str) -> tuple[str, str, float | None] | None:
    """(direction, transform, practical floor or None = the policy's) of a statistical metric."""
    return STATISTICAL.get(name)


def metric_tiers(name: str) -> list[str]:
    """Tiers a metric is gated in: every non-timing metric is exact; most are banded and replayed too."""
    if is_timing(name):
        return []
    tiers = ["exact"]
    if not name.startswith(REPLAY_EXCLUDED_PREFIXES):
        tiers.append("replay")
    if not name.endswith(BAND_EXCLUDED_SUFFIXES) and not name.startswith(BAND_EXCLUDED_PREFIXES):
        tiers.append("band")
    if stat_spec(name):
        tiers.append("statistical")
    return tiers


# ----------------------------------------------------------------------------- series helpers
Series = dict[int, float]


def load_series(run_dir: Path) -> dict[str, Series]:
    """metric -> {step: value} from a run's metrics.jsonl (a torn last line is ignored)."""
    out: dict[str, Series] = {}
    for row in read_metrics(run_dir / "metrics.jsonl"):
        step = int(row["step"])
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(key, {})[step] = float(value)
    return out


def last_step(series: dict[str, Series]) -> int:
    return max((max(s) for s in series.values() if s), default=0)


def statistical_window(policy: dict[str, Any], steps: int) -> int:
    """The statistical window: the policy's fraction of the steps (at least 1, at most half of them)."""
    return max(1, min(math.ceil(policy["window_fraction"] * steps), math.ceil(steps / 2)))


def window_mean(s: Series, end: int, window: int) -> float | None:
    """Mean over steps in (end - window, end]; a sparse metric (validation) with no value there uses
    its last value at or before ``end``."""
    vals = [v for k, v in s.items() if end - window < k <= end]
    if not vals:
        before = [k for k in s if k <= end]
        return s[max(before)] if before else None
    return math.fsum(vals) / len(vals)


def steady(s: Series, warmup: int, end: int | None = None, skip: frozenset[int] | set[int] = frozenset()
           ) -> list[float]:
    return [v for k, v in sorted(s.items())
            if k > warmup and (end is None or k <= end) and k not in skip and math.isfinite(v)]


def contended_steps(series: dict[str, Series]) -> set[int]:
    """Steps in which other work took this run's saturated CPUs (:mod:`harness.run.cpuload`)."""
    others, idle = series.get(OTHERS_METRIC, {}), series.get(IDLE_METRIC, {})
    return {k for k, v in others.items() if contended(v, idle.get(k))}


@dataclass(frozen=True)
class SteadySpeed:
    """A run's steady-step throughput values with the contended steps left out."""

    values: list[float]
    left_out: int  # contended steady steps
    others_share: float  # median share of the CPUs other work took in those steps (0 if none)
    all_values: list[float]  # every steady step's, contended or not (a lower bound of the machine's speed)

    @property
    def judgeable(self) -> bool:
        """Enough uncontended steps: none was contended, or at least half (and 3) of them were not."""
        return not self.left_out or len(self.values) >= max(3, (len(self.values) + self.left_out) // 2)

    def why_not(self) -> str:
        total = len(self.values) + self.left_out
        return (f"other work took the CPUs in {self.left_out} of {total} steady steps (median "
                f"{self.others_share:.0%} of this run's CPUs, other processes or the hypervisor's steal)")


def steady_speed(series: dict[str, Series], metric: str, warmup: int, end: int | None = None) -> SteadySpeed:
    busy = contended_steps(series)
    values = steady(series.get(metric, {}), warmup, end, skip=busy)
    every = steady(series.get(metric, {}), warmup, end)
    busy_steady = sorted(k for k in busy if k > warmup and (end is None or k <= end) and k in series.get(metric, {}))
    others = [series[OTHERS_METRIC][k] for k in busy_steady]
    return SteadySpeed(values, len(busy_steady), quantile(others, 0.5) if others else 0.0, every)


def reference_speeds(all_series: list[dict[str, Series]], policy: dict[str, Any], steps: int) -> list[list[float]]:
    """Each run's steady throughput values for a reference: its uncontended steps when enough of them are, else
    all of them (a busy machine's reference is low, so its floor lenient: `--jobs` runs are re-measured with
    `--throughput-only`); runs with uncontended figures are preferred to runs without."""
    speeds = [steady_speed(s, policy["metric"], policy["warmup_steps"]) for s in all_series]
    if not any(sp.all_values for sp in speeds):
        raise HarnessError(f"no steady steps to measure throughput (runs of {steps} steps, the first "
                           f"{policy['warmup_steps']} are warm-up)", key_path="--steps", fix="record more steps")
    clean = [sp.values if sp.judgeable else [] for sp in speeds]
    return clean if any(clean) else [sp.all_values for sp in speeds]


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default); q 0.5 is the median."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def rel_spread(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return statistics.stdev(values) / med if med else 0.0


def _finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


# ----------------------------------------------------------------------------- files
def default_path(recipe: str, profile: str, scale: str, base: Path | None = None) -> Path:
    """``baselines/<recipe>/<profile>-<scale>.json``; each name must be one path component (a name read from a
    run's manifest never leads outside the baselines directory)."""
    for what, name in (("recipe name", recipe), ("profile name", profile), ("scale name", scale)):
        safe_name(name, what=what)
    return (base or BASELINES_DIR) / recipe / f"{profile}-{scale}.json"


def load_baseline(path: Path) -> dict[str, Any]:
    return load_checked(path, "baseline")


# ----------------------------------------------------------------------------- building
def throughput_reference(env: dict[str, Any], steady_values: list[float], seed_values: list[float], q: float,
                         runtime: str, manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """One throughput reference: valid only for runs on this device model with this thread count.

    With the runs' machine speed (their manifests' calibration), the median of it is kept so that a
    run on a faster or slower machine of the same model is held to a floor scaled accordingly.
    """
    ref = {"device_model": env["machine"]["device_model"], "threads": env["software"]["threads"],
           "runtime": runtime, "value": quantile(steady_values, q), "seed_values": seed_values,
           "relative_spread": rel_spread(seed_values), "recorded_utc": utc_now()}
    speeds = [m["calibration"]["speed_index"] for m in manifests if m.get("calibration")]
    if speeds:
        ref["speed_index"] = statistics.median(speeds)
    return ref


def metric_entries(all_series: list[dict[str, Series]], steps: int, policy: dict[str, Any], primary: str, *,
                   allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The baseline's ``metrics``: per gated metric the primary run's values (the first series), the others' as
    noise, the per-step std and, for a statistical metric, each run's window mean. ``allowed`` keeps only those
    tiers (a metric left with none is not recorded)."""
    metrics: dict[str, Any] = {}
    stat_w = statistical_window(policy["statistical"], steps)
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
        if spec and "statistical" in tiers:
            entry["direction"], entry["transform"] = spec[0], spec[1]
            if spec[2] is not None:
                entry["stat_floor"] = spec[2]
            means = [window_mean(s.get(name, {}), steps, stat_w) for s in all_series]
            entry["seed_window_means"] = [m for m in means if m is not None]
        metrics[name] = entry
    return metrics


def build_baseline(run_dirs: list[Path], *, command: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A baseline document from finished runs of one recipe/profile/scale (primary seed first)."""
    policy = policy or DEFAULT_POLICY
    manifests = [load_json_strict(d / "manifest.json") for d in run_dirs]
    for d, m in zip(run_dirs, manifests):
        check(m, "manifest", str(d / "manifest.json"))
        if not is_complete(d):
            raise HarnessError("run did not complete; a baseline needs finished runs", file=str(d),
                               fix="re-run record-baseline")
    prim = manifests[0]
    for d, m in zip(run_dirs[1:], manifests[1:]):
        same = (m["recipe"]["hash"], m["profile"], m["scale"], m["steps"]["completed"])
        if same != (prim["recipe"]["hash"], prim["profile"], prim["scale"], prim["steps"]["completed"]):
            raise HarnessError("noise-seed run differs from the primary run in recipe, profile, scale or steps",
                               file=str(d), fix="record all seeds with the same command")
    if prim["overrides"]:
        raise HarnessError("the primary run has overrides; a baseline is recorded for the recipe as published",
                           file=str(run_dirs[0]), fix="record without --set")
    if any(m["fault_injection"] for m in manifests):
        raise HarnessError("a run was recorded with HARNESS_FAULT set; refusing to use it as a baseline",
                           key_path="HARNESS_FAULT", fix="unset HARNESS_FAULT and record again")
    all_series = [load_series(d) for d in run_dirs]
    steps = prim["steps"]["completed"]
    metrics = metric_entries(all_series, steps, policy, str(run_dirs[0]))
    tp, mem = policy["throughput"], policy["memory"]
    tp_seeds = reference_speeds(all_series, tp, steps)
    tp_meds = [quantile(v, tp["quantile"]) for v in tp_seeds if v]
    env = summary(prim)
    mem_peaks = [max(s[mem["metric"]].values()) for s in all_series if s.get(mem["metric"])]
    res_cfg = prim["resolved_config"]
    ws = prim.get("warm_start") or {}
    warm = {"warm_start": {"key": ws["key"], "weights_sha256": ws["weights_sha256"]}} if ws.get("weights_sha256") \
        else {}
    return {
        "schema_version": 2,
        "recipe": {"name": prim["recipe"]["name"], "hash": prim["recipe"]["hash"],
                   "config_hash": prim["recipe"]["config_hash"]},
        "profile": prim["profile"], "scale": prim["scale"],
        "architecture": res_cfg["model"]["architecture"], "dtype": res_cfg["model"]["dtype"],
        "steps": steps, "created_utc": utc_now(), "command": command,
        "primary_seed": prim["seed"], "noise_seeds": [m["seed"] for m in manifests[1:]],
        "environment": env,
        "policy": policy,
        "metrics": metrics,
        "throughput": {"references": [throughput_reference(env, [v for vals in tp_seeds for v in vals], tp_meds,
                                                           tp["quantile"], prim["runtime"]["kind"], manifests)]},
        "memory": {"value": statistics.median(mem_peaks) if mem_peaks else 0.0, "seed_values": mem_peaks,
                   "relative_spread": rel_spread(mem_peaks)},
        "runs": [{"seed": m["seed"], "run_dir": str(d), "metrics_sha256": file_sha256(d / "metrics.jsonl")}
                 for d, m in zip(run_dirs, manifests)],
        **warm,
    }
