"""Judge a finished run against its baseline: refuse, pick the tier, run the checks, write verdict.json.

Tiers (a registry, like the safety rules; the strictest eligible one names the verdict):

- ``exact`` — bitwise equality of every gated (non-timing) metric at every compared step.
  Eligible when nothing but the run itself can change the numbers: same profile and scale (else
  refused), the run and the baseline both deterministic, same software (python, torch,
  transformers, tokenizers, numpy, CUDA / torch_npu build, torch threads), same device type and
  model (the CPU architecture on cpu) and world size, same image id and lock hash (both null =
  two local runs), and the baseline's primary seed. ``--set`` overrides do NOT make a run
  ineligible: with environment and seed equal an override is the only thing that can move the
  numbers, so it is judged bitwise like any other change (the verdict names it). This is
  deliberate: some real regressions are invisible to the looser tiers in a smoke run (the KL
  coefficient 0.01 -> 0 moves no curve beyond the seed noise in 40 steps) yet change every bit.
  Under ``exact`` a mismatch FAILS. ``--tier exact`` also forces it for another seed (which then
  fails bitwise); it is refused when the environment differs.
- ``band`` — per step ``|run - ref| <= max(atol, rtol*|ref|, k*noise)`` with the noise floor
  measured from the baseline's seeds; ``failures_per_50_steps`` failing steps allowed per metric.
  Used across machines, images, seeds or overrides.
- ``statistical`` — MLPerf-RCP style: the run's mean over the last W steps of each convergence
  metric (train reward, validation reward) must not be significantly worse than the baseline
  seeds' windowed means (one-sided prediction t-test at alpha) by more than a practical floor.

Every verdict also runs the looser tiers under the strictest (exact ⇒ band and statistical pass
trivially when bitwise equal, and say how far off a mismatch is), plus throughput (a quantile of
tokens/s over steady steps, the 90th by default: see harness.baseline; one-sided) and peak memory
(one-sided). A run shorter than the baseline is compared on the common prefix of steps. Refused (exit 2, nothing compared): a manifest that fails
its schema, an unfinished run, another recipe hash, architecture, profile or scale. A run with an
injected fault is judged like any other; the verdict names the fault.
"""

from __future__ import annotations

import math
import os
import stat
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.baseline import (default_path, effective_window, environment_summary, file_sha256, load_baseline,
                              load_series, quantile, steady, window_mean)
from harness.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, HarnessError
from harness.jsonio import load_json_strict, write_json_atomic
from harness.record import MARKER, utc_now
from harness.schema import check, schema_errors

TIER_ORDER = ("exact", "band", "statistical")  # strictest first
VERDICT_FILE = "verdict.json"


@dataclass
class Check:
    group: str
    metric: str
    step: int | None
    run_value: float | None
    ref_value: float | None
    tolerance: float | None
    passed: bool
    steps_compared: int = 0
    failing_steps: list[int] = field(default_factory=list)
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("run_value", "ref_value", "tolerance"):
            if d[key] is not None and not math.isfinite(d[key]):
                d[key] = None  # JSON has no NaN; the detail keeps the text
        return d


@dataclass
class Context:
    """What a tier needs: the run's series, the baseline, and how many steps are compared."""

    run: dict[str, dict[int, float]]
    baseline: dict[str, Any]
    upto: int

    def ref_steps(self, name: str) -> list[tuple[int, float, float, list[float | None]]]:
        """(step, ref value, noise std, noise values) for the compared steps of a baseline metric."""
        m = self.baseline["metrics"][name]
        return [(k, v, n, [row[i] for row in m["noise_values"]])
                for i, (k, v, n) in enumerate(zip(m["steps"], m["values"], m["noise_std"])) if k <= self.upto]


TIERS: dict[str, Callable[[Context], list[Check]]] = {}


def tier(name: str) -> Callable[[Callable[[Context], list[Check]]], Callable[[Context], list[Check]]]:
    def deco(fn: Callable[[Context], list[Check]]) -> Callable[[Context], list[Check]]:
        TIERS[name] = fn
        return fn
    return deco


def _fmt(x: float | None) -> str:
    return "missing" if x is None else repr(x) if not math.isfinite(x) else f"{x:.6g}"


def _full(x: float | None) -> str:
    return "missing" if x is None else repr(x)


def bitwise_equal(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))


def gated(ctx: Context, tier_name: str) -> list[str]:
    return sorted(n for n, m in ctx.baseline["metrics"].items() if tier_name in m["tiers"])


# ----------------------------------------------------------------------------- tiers
@tier("exact")
def exact_tier(ctx: Context) -> list[Check]:
    out = []
    for name in gated(ctx, "exact"):
        run = ctx.run.get(name, {})
        rows = ctx.ref_steps(name)
        bad = [k for k, v, _, _ in rows if not bitwise_equal(run.get(k), v)]
        k0 = bad[0] if bad else (rows[-1][0] if rows else None)
        ref = dict((k, v) for k, v, _, _ in rows)
        detail = ("bitwise equal" if not bad else
                  f"first difference at step {k0}: {_full(run.get(k0))} vs {_full(ref.get(k0))}"
                  f" ({len(bad)}/{len(rows)} steps differ)")
        out.append(Check("exact", name, k0, run.get(k0) if k0 is not None else None, ref.get(k0), 0.0, not bad,
                         len(rows), bad, detail))
    return out


def noise_floor(stds: list[float], i: int, window: int) -> float:
    return max(stds[max(0, i - window): i + window + 1], default=0.0)


@tier("band")
def band_tier(ctx: Context) -> list[Check]:
    pol = ctx.baseline["policy"]["band"]
    out = []
    for name in gated(ctx, "band"):
        spec = ctx.baseline["metrics"][name]
        rtol, atol = spec.get("rtol", pol["rtol"]), spec.get("atol", pol["atol"])
        run = ctx.run.get(name, {})
        rows = ctx.ref_steps(name)
        stds = [n for _, _, n, _ in rows]
        bad, worst = [], (-1.0, None, None, None, None)
        for i, (k, v, _, _) in enumerate(rows):
            tol = max(atol, rtol * abs(v), pol["k_noise"] * noise_floor(stds, i, pol["noise_window"]))
            r = run.get(k)
            dev = abs(r - v) if r is not None and math.isfinite(r) else math.inf
            ratio = dev / tol if tol > 0 else (0.0 if dev == 0 else math.inf)
            if not dev <= tol:
                bad.append(k)
            if ratio > worst[0]:
                worst = (ratio, k, r, v, tol)
        allowed = pol["failures_per_50_steps"] * math.ceil(len(rows) / 50)
        ok = len(bad) <= allowed and bool(rows)
        _, k, r, v, tol = worst
        detail = (f"{len(bad)}/{len(rows)} steps outside the band (allowed {allowed}); worst at step {k}: "
                  f"{_fmt(r)} vs {_fmt(v)} ± {_fmt(tol)}" if rows else "no steps to compare")
        out.append(Check("band", name, k, r, v, tol, ok, len(rows), bad, detail))
    return out


def stat_threshold(seed_means: list[float], alpha: float, floor: float) -> tuple[float, float, float]:
    """(mean, sd, allowed shortfall): a run worse than mean by more than the shortfall fails."""
    from scipy import stats

    mu = math.fsum(seed_means) / len(seed_means)
    if len(seed_means) < 2:
        return mu, 0.0, floor
    sd = statistics.stdev(seed_means)
    t_crit = float(stats.t.ppf(1 - alpha, len(seed_means) - 1))
    return mu, sd, max(floor, t_crit * sd * math.sqrt(1 + 1 / len(seed_means)))


@tier("statistical")
def statistical_tier(ctx: Context) -> list[Check]:
    pol = ctx.baseline["policy"]["statistical"]
    w = effective_window(pol["window"], ctx.upto)
    out = []
    for name in gated(ctx, "statistical"):
        spec = ctx.baseline["metrics"][name]
        ref_series = [dict(zip(spec["steps"], spec["values"]))]
        ref_series += [{k: v for k, v in zip(spec["steps"], row) if v is not None} for row in spec["noise_values"]]
        seed_means = [m for m in (window_mean(s, ctx.upto, w) for s in ref_series) if m is not None]
        x = window_mean(ctx.run.get(name, {}), ctx.upto, w)
        if not seed_means:
            continue
        mu, sd, allowed = stat_threshold(seed_means, pol["alpha"], pol["practical_floor"])
        sign = 1.0 if spec.get("direction", "higher-is-better") == "higher-is-better" else -1.0
        shortfall = sign * (mu - x) if x is not None and math.isfinite(x) else math.inf
        ok = shortfall <= allowed
        word = "below" if sign > 0 else "above"
        detail = (f"mean of the last {w} steps {_fmt(x)} vs seeds {_fmt(mu)} (sd {_fmt(sd)}, n {len(seed_means)}); "
                  f"{_fmt(abs(shortfall)) if math.isfinite(shortfall) else 'no value'} "
                  f"{word if shortfall >= 0 else ('above' if sign > 0 else 'below')} (allowed {_fmt(allowed)} {word})")
        out.append(Check("statistical", name, ctx.upto, x, mu, allowed, ok, len(seed_means), [] if ok else [ctx.upto],
                         detail))
    return out


def throughput_check(ctx: Context, notices: list[str]) -> list[Check]:
    pol, ref = ctx.baseline["policy"]["throughput"], ctx.baseline["throughput"]
    vals = steady(ctx.run.get(pol["metric"], {}), pol["warmup_steps"], ctx.upto)
    if not vals:
        notices.append(f"throughput not checked: no steady steps (the first {pol['warmup_steps']} are warm-up)")
        return []
    q = pol.get("quantile", 0.5)
    med, base = quantile(vals, q), ref["value"]
    tol = min(pol["max_tolerance"], max(pol["min_tolerance"], pol["spread_factor"] * ref["relative_spread"]))
    ok = med >= base * (1 - tol)
    if med > base * pol["refresh_ratio"]:
        notices.append(f"throughput {med:,.0f} tok/s is {med / base:.2f}x the baseline's {base:,.0f}: "
                       "refresh the baseline (record-baseline --force)")
    what = "median" if q == 0.5 else f"p{q * 100:.0f}"
    detail = (f"{what} {med:,.0f} tok/s over {len(vals)} steady steps vs {base:,.0f} "
              f"({(med / base - 1) * 100:+.1f}%; floor -{tol * 100:.0f}%)")
    return [Check("throughput", pol["metric"], None, med, base, base * tol, ok, len(vals), [], detail)]


def memory_check(ctx: Context) -> list[Check]:
    pol, ref = ctx.baseline["policy"]["memory"], ctx.baseline["memory"]
    vals = [v for k, v in ctx.run.get(pol["metric"], {}).items() if k <= ctx.upto and math.isfinite(v)]
    if not vals or not ref["seed_values"]:
        return []
    peak, base = max(vals), ref["value"]
    ok = peak <= base * (1 + pol["tolerance"])
    detail = f"peak {peak:.3f} GB vs {base:.3f} GB (ceiling +{pol['tolerance'] * 100:.0f}%)"
    return [Check("memory", pol["metric"], None, peak, base, base * pol["tolerance"], ok, len(vals), [], detail)]


# ----------------------------------------------------------------------------- eligibility
def refusal_reasons(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    out = []
    if manifest["recipe"]["hash"] != baseline["recipe"]["hash"]:
        out.append(f"recipe hash {manifest['recipe']['hash'][:12]} differs from the baseline's "
                   f"{baseline['recipe']['hash'][:12]} (the recipe changed: re-record the baseline)")
    if manifest["resolved_config"]["model"]["architecture"] != baseline["architecture"]:
        out.append("model architecture differs from the baseline's")
    if manifest["profile"] != baseline["profile"]:
        out.append(f"profile '{manifest['profile']}' differs from the baseline's '{baseline['profile']}'")
    if manifest["scale"] != baseline["scale"]:
        out.append(f"scale '{manifest['scale']}' differs from the baseline's '{baseline['scale']}'")
    return out


def environment_differences(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """Why bits could differ for reasons other than the seed or overrides (empty = same environment)."""
    run, ref = environment_summary(manifest), baseline["environment"]
    out = []
    if not (run["deterministic"] and ref["deterministic"]):
        out.append("not deterministic")
    for key in ref["software"]:
        if run["software"].get(key) != ref["software"][key]:
            out.append(f"{key} {run['software'].get(key)} vs {ref['software'][key]}")
    for key in ("device_type", "device_model", "device_count"):
        if run["machine"][key] != ref["machine"][key]:
            out.append(f"{key} {run['machine'][key]} vs {ref['machine'][key]}")
    for key in ("world_size", "image_id", "lock_sha256"):
        if run["runtime"][key] != ref["runtime"][key]:
            out.append(f"{key} {run['runtime'][key]} vs {ref['runtime'][key]}")
    return out


def seed_difference(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    if manifest["seed"] != baseline["primary_seed"]:
        return [f"seed {manifest['seed']} vs the baseline's {baseline['primary_seed']}"]
    return []


def run_differences(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """What the run itself changed relative to the baseline's primary run (seed, overrides, config)."""
    out = seed_difference(manifest, baseline)
    if manifest["overrides"]:
        out.append("overrides " + ", ".join(f"{o['key']}={o['value']}" for o in manifest["overrides"]))
    elif manifest["recipe"]["config_hash"] != baseline["recipe"]["config_hash"]:
        out.append("resolved config hash differs")
    return out


def choose_tiers(manifest: dict[str, Any], baseline: dict[str, Any], forced: str | None) -> tuple[list[str], str]:
    env, seed = environment_differences(manifest, baseline), seed_difference(manifest, baseline)
    diff = run_differences(manifest, baseline)
    if forced == "exact":
        if env:
            raise _Refusal(f"--tier exact needs the baseline's environment; differs: {'; '.join(env)}")
        why = "forced with --tier exact" + (f" (run differs: {'; '.join(diff)})" if diff else "")
        return list(TIER_ORDER), why
    if forced:
        return list(TIER_ORDER[TIER_ORDER.index(forced):]), f"forced with --tier {forced}"
    if not env and not seed:
        why = "same environment and seed, deterministic"
        if diff:
            why += f"; {'; '.join(diff)}: judged bitwise like any other change"
        return list(TIER_ORDER), why
    return ["band", "statistical"], "not exact-eligible: " + "; ".join(env + diff)


class _Refusal(Exception):
    pass


# ----------------------------------------------------------------------------- verdict
@dataclass
class Verdict:
    status: str
    run: dict[str, Any]
    tier: str | None = None
    tiers_applied: list[str] = field(default_factory=list)
    tier_reason: str = ""
    forced_tier: str | None = None
    baseline: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    overrides: list[dict[str, Any]] = field(default_factory=list)
    fault_injection: dict[str, Any] | None = None
    reasons: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    created_utc: str = field(default_factory=utc_now)

    @property
    def exit_code(self) -> int:
        return {"pass": EXIT_OK, "no-baseline": EXIT_OK, "fail": EXIT_FINDINGS}.get(self.status, EXIT_USAGE)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for c in self.checks:
            g = out.setdefault(c.group, {"checks": 0, "failed": 0})
            g["checks"] += 1
            g["failed"] += not c.passed
        return out

    def summary_line(self) -> str:
        r = self.run
        head = f"{self.status.upper()} {r.get('recipe') or '?'} {r.get('profile') or '?'}:{r.get('scale') or '?'}"
        if self.status in ("refused", "no-baseline"):
            return f"{head} {'; '.join(self.reasons or self.notices)}"
        parts = [f"{head} tier={self.tier}"]
        counts = self.counts()
        if self.tier in counts:
            c = counts[self.tier]
            word = {"exact": "equal", "band": "within band", "statistical": "not worse"}[self.tier]
            parts.append(f"{c['checks'] - c['failed']}/{c['checks']} gated metrics {word}")
        for g in ("band", "statistical"):
            if g != self.tier and g in counts and counts[g]["failed"]:
                parts.append(f"{g} {counts[g]['failed']} failed")
        for c in self.checks:
            if c.group == "throughput":
                tol = (c.tolerance or 0) / (c.ref_value or 1)
                parts.append(f"throughput {_k(c.run_value)} tok/s (ref {_k(c.ref_value)}, -{tol * 100:.0f}% floor)"
                             + ("" if c.passed else " SLOWER"))
            if c.group == "memory":
                ceil = (c.ref_value or 0) + (c.tolerance or 0)
                parts.append(f"memory {c.run_value:.2f} GB {'≤' if c.passed else '>'} {ceil:.2f} GB")
        bad = [c for c in self.checks if not c.passed]
        if bad:
            c = bad[0]
            where = f" at step {c.step}" if c.step is not None and c.group in ("exact", "band") else ""
            parts.append(f"first failure: {c.group} {c.metric}{where} ({_fmt(c.run_value)} vs {_fmt(c.ref_value)})")
        if self.fault_injection:
            parts.append("fault injected: " + ",".join(f"{k}={v}" for k, v in self.fault_injection.items()))
        if self.overrides:
            parts.append("overrides: " + ",".join(f"{o['key']}={o['value']}" for o in self.overrides))
        return parts[0] + " " + "; ".join(parts[1:])

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "status": self.status, "tier": self.tier, "tiers_applied": self.tiers_applied,
                "tier_reason": self.tier_reason, "forced_tier": self.forced_tier, "created_utc": self.created_utc,
                "run": self.run, "baseline": self.baseline, "policy": self.policy, "overrides": self.overrides,
                "fault_injection": self.fault_injection, "reasons": self.reasons, "notices": self.notices,
                "counts": self.counts(), "checks": [c.as_dict() for c in self.checks],
                "summary_line": self.summary_line()}


def _k(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x / 1000:.1f}k" if abs(x) >= 1000 else f"{x:.0f}"


def evaluate(run: dict[str, dict[int, float]], baseline: dict[str, Any], tiers: list[str],
             upto: int) -> tuple[list[Check], list[str]]:
    """Pure: every check of ``tiers`` plus throughput and memory, and notices."""
    ctx = Context(run, baseline, upto)
    notices: list[str] = []
    checks = [c for t in tiers for c in TIERS[t](ctx)]
    checks += throughput_check(ctx, notices) + memory_check(ctx)
    return checks, notices


def failure_reasons(checks: list[Check]) -> list[str]:
    out = []
    for group in ("exact", "band", "statistical", "throughput", "memory"):
        bad = [c for c in checks if c.group == group and not c.passed]
        if bad:
            names = ", ".join(c.metric for c in bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else "")
            out.append(f"{group}: {len(bad)} check(s) failed: {names} — {bad[0].metric}: {bad[0].detail}")
    return out


def judge(run_dir: Path, res: Any = None, baseline_path: Path | None = None, *, tier: str | None = None,
          write: bool = True) -> Verdict:
    """Judge ``run_dir`` and write ``verdict.json`` there (``res`` is accepted for the caller's convenience;
    everything is read from the run's own manifest)."""
    run_dir = Path(run_dir)
    verdict = _judge(run_dir, baseline_path, tier)
    if write:
        doc = verdict.to_dict()
        check(doc, "verdict", str(run_dir / VERDICT_FILE))
        write_json_atomic(run_dir / VERDICT_FILE, doc)
    return verdict


def require_baseline_file(path: Path) -> None:
    """A baseline named explicitly (``--baseline``) must be a regular file: missing is bad input (exit 2),
    not "no baseline recorded yet"."""
    try:
        ok = stat.S_ISREG(os.stat(path).st_mode)
    except OSError as err:
        raise HarnessError(f"baseline file cannot be used ({err.strerror})", file=str(path), key_path="--baseline",
                           fix="check the path, or leave --baseline out to use the recipe's own") from None
    if not ok:
        raise HarnessError("baseline is not a regular file", file=str(path), key_path="--baseline",
                           fix="name a baseline .json file")


def _judge(run_dir: Path, baseline_path: Path | None, forced: str | None) -> Verdict:
    if baseline_path is not None:
        require_baseline_file(Path(baseline_path))
    if forced is not None and forced not in TIERS:
        raise HarnessError(f"unknown tier '{forced}'", key_path="--tier", fix=f"use one of {', '.join(TIER_ORDER)}")
    mpath = run_dir / "manifest.json"
    if not mpath.is_file():
        raise HarnessError("not a run directory (no manifest.json)", file=str(run_dir), fix="give a run directory")
    manifest = load_json_strict(mpath)
    errs = schema_errors(manifest, "manifest")
    info = {"dir": str(run_dir), "recipe": None, "profile": None, "scale": None, "seed": None, "status": None,
            "steps_completed": None}
    if isinstance(manifest, dict):
        info.update(recipe=(manifest.get("recipe") or {}).get("name"), profile=manifest.get("profile"),
                    scale=manifest.get("scale"), seed=manifest.get("seed"), status=manifest.get("status"),
                    steps_completed=(manifest.get("steps") or {}).get("completed"))
        info = {k: v if (v is None or isinstance(v, (str, int)) and not isinstance(v, bool)) else None
                for k, v in info.items()}
    if errs:
        ptr, msg, fix = errs[0]
        return Verdict("refused", info, forced_tier=forced, reasons=[
            f"{mpath}::{ptr}: manifest fails its schema: {msg} (fix: {fix})"])
    v = Verdict("refused", info, forced_tier=forced, overrides=manifest["overrides"],
                fault_injection=manifest["fault_injection"])
    if manifest["fault_injection"]:
        v.notices.append("fault injected for testing: " + ", ".join(f"{k}={val}" for k, val in
                                                                    manifest["fault_injection"].items()))
    if manifest["status"] != "complete" or (run_dir / MARKER).exists():
        v.reasons.append(f"run is not complete (status {manifest['status']}"
                         f"{', INCOMPLETE marker present' if (run_dir / MARKER).exists() else ''}); "
                         "only finished runs are compared")
        return v
    path = Path(baseline_path) if baseline_path else default_path(manifest["recipe"]["name"], manifest["profile"],
                                                                  manifest["scale"])
    if not path.is_file():
        v.status = "no-baseline"
        v.notices.append(f"no baseline at {path}; record one with `harness record-baseline "
                         f"{manifest['recipe']['name']} --profile {manifest['profile']} --scale {manifest['scale']} "
                         "--seeds 3`")
        return v
    try:
        baseline = load_baseline(path)
    except HarnessError as err:  # a broken baseline is a refusal with its pointer, never a half verdict
        v.reasons.append(f"baseline unusable: {err.one_line()}")
        return v
    run = load_series(run_dir)
    upto = min(manifest["steps"]["completed"], baseline["steps"])
    v.baseline = {"path": str(path), "sha256": file_sha256(path), "steps": baseline["steps"],
                  "primary_seed": baseline["primary_seed"], "noise_seeds": baseline["noise_seeds"],
                  "steps_compared": upto}
    v.policy = baseline["policy"]
    reasons = refusal_reasons(manifest, baseline)
    if reasons:
        v.reasons = reasons
        return v
    try:
        tiers, why = choose_tiers(manifest, baseline, forced)
    except _Refusal as err:
        v.reasons = [str(err)]
        return v
    if manifest["steps"]["completed"] != baseline["steps"]:
        v.notices.append(f"compared the first {upto} steps (run {manifest['steps']['completed']}, "
                         f"baseline {baseline['steps']})")
    v.tier, v.tiers_applied, v.tier_reason = tiers[0], tiers, why
    v.checks, notices = evaluate(run, baseline, tiers, upto)
    v.notices += notices
    v.reasons = failure_reasons(v.checks)
    if v.tier == "exact" and any(c.group == "exact" and not c.passed for c in v.checks):
        diff = run_differences(manifest, baseline)
        if diff:
            v.reasons.append("under exact the run must match the baseline's primary run; it differs: "
                             + "; ".join(diff))
    v.status = "fail" if v.reasons else "pass"
    return v
