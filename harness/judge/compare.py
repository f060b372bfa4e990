"""Judge a finished run against its baseline: refuse, pick the tier, run the checks, write verdict.json.

The tiers themselves live in :mod:`harness.judge.tiers`; this module decides which apply:

- ``exact`` when nothing but the run itself can change the numbers: same profile and scale (else
  refused), both deterministic, same software, device type and count, world size and image / lock,
  the same CPU numerics pin (:mod:`harness.numerics`; then the CPU model may differ) or the same
  device model, and the baseline's primary seed. ``--set`` overrides do NOT make a run ineligible:
  with environment and seed equal an override is the only thing that can move the numbers, so it is
  judged bitwise like any other change (the verdict names it). Under ``exact`` a mismatch FAILS.
- ``replay`` for a run that replayed the baseline's recorded rollouts (``harness run`` chooses it
  when the environment rules out ``exact`` and the baseline has rollouts; ``--tier replay``).
- ``statistical`` for a free run that cannot be exact (another seed, another environment without
  a replay); ``band`` only when forced.

Every verdict lists each environment difference (:mod:`harness.run.environment`), plus throughput
(only against a reference from the same device model and thread count) and peak memory. A run
shorter than the baseline is compared on the common prefix of steps. Refused (exit 2, nothing
compared): a manifest that fails its schema, an unfinished run, another recipe hash, architecture
or scale, another profile (except for a replay, which may run a baseline on other hardware).
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.schema import check, schema_errors
from harness.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, HarnessError
from harness.jsonio import file_sha256, load_json_strict, write_json_atomic
from harness.judge import candidates, probe
from harness.judge.baseline import default_path, load_baseline, load_series
from harness.judge.tiers import TIER_ORDER, TIERS, Check, Context, bitwise_equal, evaluate, fmt  # noqa: F401 (re-exported)
from harness.run import environment
from harness.run.record import MARKER, utc_now

VERDICT_FILE = "verdict.json"


# ----------------------------------------------------------------------------- eligibility
def refusal_reasons(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    out = []
    if manifest["recipe"]["hash"] != baseline["recipe"]["hash"]:
        out.append(f"recipe hash {manifest['recipe']['hash'][:12]} differs from the baseline's "
                   f"{baseline['recipe']['hash'][:12]} (the recipe changed: re-record the baseline)")
    if manifest["resolved_config"]["model"]["architecture"] != baseline["architecture"]:
        out.append("model architecture differs from the baseline's")
    if manifest["profile"] != baseline["profile"] and not manifest.get("replay"):
        out.append(f"profile '{manifest['profile']}' differs from the baseline's '{baseline['profile']}' (another "
                   "profile can only replay it: --tier replay)")
    if manifest["scale"] != baseline["scale"]:
        out.append(f"scale '{manifest['scale']}' differs from the baseline's '{baseline['scale']}'")
    return out


def environment_changes(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[environment.Change]:
    if baseline["environment"] is None:  # a baseline from another trainer's logs (harness.judge.foreign)
        return [environment.Change("environment", "this run's", "unknown (a baseline from trainer logs)", True)]
    return environment.changes(environment.summary(manifest), baseline["environment"])


def seed_difference(manifest: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    if baseline["primary_seed"] is None:
        return [f"seed {manifest['seed']} vs the baseline's, unknown (trainer logs)"]
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
    blocking = [c.text() for c in environment_changes(manifest, baseline) if c.blocks_exact]
    seed, diff = seed_difference(manifest, baseline), run_differences(manifest, baseline)
    if manifest.get("replay"):
        if forced not in (None, "replay"):
            raise _Refusal(f"a replay run is judged by the replay tier only, not --tier {forced}")
        why = "replayed the baseline's recorded rollouts"
        if blocking:
            why += " (not exact-eligible: " + "; ".join(blocking) + ")"
        return ["replay"], why
    if forced == "replay":
        raise _Refusal("the run did not replay the baseline's rollouts; run it with `harness run … --tier replay`")
    if forced == "exact":
        if blocking:
            raise _Refusal(f"--tier exact needs the baseline's environment; differs: {'; '.join(blocking)}")
        why = "forced with --tier exact" + (f" (run differs: {'; '.join(diff)})" if diff else "")
        return ["exact", "band", "statistical"], why
    if forced:
        return list(TIER_ORDER[TIER_ORDER.index(forced):]), f"forced with --tier {forced}"
    if not blocking and not seed:
        why = "same environment and seed, deterministic"
        if diff:
            why += f"; {'; '.join(diff)}: judged bitwise like any other change"
        return ["exact", "band", "statistical"], why
    return ["statistical"], "not exact-eligible: " + "; ".join(blocking + diff)


class _Refusal(Exception):
    pass


WARM_START = "warm start"  # how a verdict's reason about the warm-start weights begins


def warm_start_finding(manifest: dict[str, Any], baseline: dict[str, Any]) -> tuple[str | None, str | None]:
    """(reason, notice) about the run's warm-start weights against the baseline primary run's.

    With the baseline's environment, seed and settings the warm start is the same bits, so a different digest
    is a finding (the cache entry was changed or planted, or the warm start trains differently now); where
    anything else differs it is expected and only noted.
    """
    ref, ws = baseline.get("warm_start"), manifest.get("warm_start")
    if not ref or not ws or manifest.get("replay"):
        return None, None
    digest = ws.get("weights_sha256")
    if digest is None:
        return None, f"{WARM_START} not compared: the run's manifest does not record its weights' digest"
    if digest == ref["weights_sha256"]:
        return None, None
    where = (f"loaded from the warm-start cache entry {ws['path']}" if ws.get("cached")
             else f"trained now into {ws['path']}")
    text = (f"{WARM_START}: the run's warm-start weights (sha256 {digest[:12]}, {where}) differ from the "
            f"baseline's ({ref['weights_sha256'][:12]})")
    moved = [c.text() for c in environment_changes(manifest, baseline) if c.blocks_exact] \
        + run_differences(manifest, baseline)
    if moved:
        return None, f"{text}, as expected where the run differs ({'; '.join(moved)})"
    fix = (f"delete {ws['path']} and its .json (or set HARNESS_CACHE to an empty directory) and run again"
           if ws.get("cached") else "the warm start trains to other weights than when the baseline was recorded: "
                                    "re-record the baseline if that is intended")
    return f"{text} although the environment, seed and settings are the baseline's (fix: {fix})", None


def _add_candidates(v: Verdict, ctx: Context, run_dir: Path, manifest: dict[str, Any],
                    baseline: dict[str, Any]) -> None:
    """Judge the run with its candidate runs (other seeds, :mod:`harness.judge.candidates`); say when the
    baseline's policy asks for more than there are."""
    found = candidates.find(run_dir, manifest)
    v.notices += found.notices
    ctx.candidates = [load_series(d) for _, d in found.runs]
    v.candidates = [{"seed": seed, "dir": str(d)} for seed, d in found.runs]
    wanted = baseline["policy"]["statistical"].get("candidate_runs", 1)
    if len(found.runs) + 1 < wanted:
        v.notices.append(f"statistical: judged on {len(found.runs) + 1} run(s), the baseline's policy asks for "
                         f"{wanted} (`harness run` trains the candidates; a single run's false-alarm rate is higher: "
                         "baselines/README.md)")


def _add_probe(v: Verdict, ctx: Context, run_dir: Path, manifest: dict[str, Any], baseline: dict[str, Any]) -> None:
    """Judge the run's replay probe (:mod:`harness.judge.probe`) by the replay tier; say when there is none."""
    assert v.baseline is not None  # set before any tier is chosen
    why = probe.unavailable(baseline, manifest["runtime"]["kind"])
    found = probe.find(run_dir, manifest, v.baseline["sha256"]) if not why else probe.Probe(None, None, [])
    v.notices += found.notices
    if found.dir is None or found.manifest is None:
        v.notices.append("statistical: no replay probe, so faults below the seeds' spread go unseen ("
                         + (why or "`harness run` trains it into RUN_DIR/" + probe.PROBE_DIR + "/") + ")")
        if not why:
            v.probe_wanted = probe.Wanted(Path(v.baseline["path"]), int(baseline["primary_seed"]),
                                          probe.probe_steps(baseline))
        return
    m = found.manifest
    upto = min(m["steps"]["completed"], probe.probe_steps(baseline))
    pctx = Context(load_series(found.dir), baseline, upto, environment.summary(m),
                   m["resolved_config"]["model"]["dtype"], ctx.baseline_dtype)
    v.checks += TIERS["replay"](pctx)
    v.tiers_applied = [*v.tiers_applied, "replay"]
    v.replay_probe = {"dir": str(found.dir), "steps_compared": upto}


def _bitwise_reproduced(ctx: Context) -> bool:
    """Every exact-gated metric of the run equals the baseline's primary run at every step, bit for bit.

    Exact-eligibility predicts whether an environment *can* reproduce the baseline; a run that did is
    judged exact whatever the prediction (e.g. the README's container: another Python build and image
    than the local run that recorded the baseline, the same wheels and numerics pin, the same bits).
    """
    from harness.judge.tiers import exact_tier

    checks = exact_tier(ctx)
    return bool(checks) and all(c.passed for c in checks)


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
    changes: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)  # other seeds judged with the run (statistical)
    replay_probe: dict[str, Any] | None = None  # the baseline's first steps replayed with the run's settings
    logs: list[dict[str, Any]] | None = None  # another trainer's logs judged (harness.judge.foreign), run first
    crosscheck: list[dict[str, Any]] | None = None  # per metric: the run's window mean vs the seeds' spread
    probe_wanted: probe.Wanted | None = field(default=None, repr=False)  # not written: what `harness run` trains
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
            n = counts[self.tier]
            word = {"exact": "equal", "replay": "within replay tolerance", "band": "within band",
                    "statistical": "not worse"}[self.tier]
            runs = 1 + len(self.candidates) + max(0, len(self.logs or []) - 1)
            parts.append(f"{n['checks'] - n['failed']}/{n['checks']} gated metrics {word}"
                         + (f" (median of {runs} runs)" if self.tier == "statistical" and runs > 1 else ""))
        if self.replay_probe is not None and "replay" in counts:
            n = counts["replay"]
            parts.append(f"replay probe {n['checks'] - n['failed']}/{n['checks']} within tolerance "
                         f"({self.replay_probe['steps_compared']} steps)")
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
        if not any(c.group == "throughput" for c in self.checks):  # say why, in a word (the notice has the rest)
            parts += [n.split(":")[0] for n in self.notices if n.startswith("throughput not ")][:1]
        bad = [c for c in self.checks if not c.passed]
        if bad:  # the earliest: of the checks failing per step, the one whose first failing step comes first
            e = min(bad, key=lambda c: c.failing_steps[0] if c.failing_steps else math.inf)
            per_step = e.step is not None and e.group in ("exact", "replay", "band")
            first = e.failing_steps[0] if per_step and e.failing_steps and e.failing_steps[0] != e.step else None
            where = (f" from step {first}, worst at step {e.step}" if first is not None
                     else f" at step {e.step}" if per_step else "")
            parts.append(f"first failure: {e.group} {e.metric}{where} ({fmt(e.run_value)} vs {fmt(e.ref_value)})")
        parts += [r.split(" (fix:")[0] for r in self.reasons if r.startswith(WARM_START + ":")]
        if self.fault_injection:
            parts.append("fault injected: " + ",".join(f"{k}={v}" for k, v in self.fault_injection.items()))
        if self.overrides:
            parts.append("overrides: " + ",".join(f"{o['key']}={o['value']}" for o in self.overrides))
        if self.changes:
            parts.append("changed: " + ", ".join(f"{c['key']} {c['baseline']} -> {c['run']}" for c in self.changes))
        return parts[0] + " " + "; ".join(parts[1:])

    def to_dict(self) -> dict[str, Any]:
        extra = {k: x for k, x in (("logs", self.logs), ("crosscheck", self.crosscheck)) if x is not None}
        return {**extra, "schema_version": 1, "status": self.status, "tier": self.tier, "tiers_applied": self.tiers_applied,
                "tier_reason": self.tier_reason, "forced_tier": self.forced_tier, "created_utc": self.created_utc,
                "run": self.run, "baseline": self.baseline, "policy": self.policy, "overrides": self.overrides,
                "fault_injection": self.fault_injection, "reasons": self.reasons, "notices": self.notices,
                "counts": self.counts(), "checks": [c.as_dict() for c in self.checks], "changes": self.changes,
                "candidates": self.candidates, "replay_probe": self.replay_probe,
                "summary_line": self.summary_line()}


def _k(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x / 1000:.1f}k" if abs(x) >= 1000 else f"{x:.0f}"


def failure_reasons(checks: list[Check]) -> list[str]:
    out = []
    for group in ("exact", "replay", "band", "statistical", "throughput", "memory"):
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
        write_verdict(run_dir, verdict)
    return verdict


def write_verdict(run_dir: Path, verdict: Verdict) -> None:
    """``run_dir/verdict.json``, checked against its schema, written atomically."""
    doc = verdict.to_dict()
    check(doc, "verdict", str(Path(run_dir) / VERDICT_FILE))
    write_json_atomic(Path(run_dir) / VERDICT_FILE, doc)


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
    replayed = (manifest.get("replay") or {}).get("baseline")
    path = Path(baseline_path) if baseline_path else Path(replayed) if replayed else default_path(
        manifest["recipe"]["name"], manifest["profile"], manifest["scale"])
    if not path.is_file():
        v.status = "no-baseline"
        v.notices.append(f"no baseline at {path}; record one with `harness record-baseline "
                         f"{manifest['recipe']['name']} --profile {manifest['profile']} --scale {manifest['scale']} "
                         "--seeds 5`")
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
    run_env = environment.summary(manifest)
    v.changes = [{"key": c.key, "baseline": c.ref, "run": c.run, "blocks_exact": c.blocks_exact}
                 for c in environment_changes(manifest, baseline)]
    ctx = Context(run, baseline, upto, run_env, manifest["resolved_config"]["model"]["dtype"],
                  baseline.get("dtype", "float32"), (manifest.get("calibration") or {}).get("speed_index"))
    if forced is None and tiers == ["statistical"] and not seed_difference(manifest, baseline) \
            and _bitwise_reproduced(ctx):
        v.tier, v.tiers_applied = "exact", ["exact", "band", "statistical"]
        v.tier_reason = ("bitwise equal to the baseline's primary run although " + why
                         + ": these differences did not change a bit of the gated metrics")
        tiers = v.tiers_applied
    if v.tier == "statistical":
        _add_candidates(v, ctx, run_dir, manifest, baseline)
    replayed = bool(manifest.get("replay"))
    moved = [c["key"] for c in v.changes if c["blocks_exact"]] + (["replay run (no sampling)"] if replayed else [])
    v.checks, notices = evaluate(ctx, tiers, throughput=not replayed, memory_differs=moved)
    v.notices += notices
    if v.tier == "statistical":
        _add_probe(v, ctx, run_dir, manifest, baseline)
    if baseline["environment"] is None:  # a harness run against another trainer's logs: where they differ
        from harness.judge.tiers import crosscheck

        v.crosscheck = crosscheck(ctx)
    v.reasons = failure_reasons(v.checks)
    warm_reason, warm_notice = warm_start_finding(manifest, baseline)
    v.reasons += [warm_reason] if warm_reason else []
    v.notices += [warm_notice] if warm_notice else []
    if v.tier == "exact" and any(c.group == "exact" and not c.passed for c in v.checks):
        diff = run_differences(manifest, baseline)
        if diff:
            v.reasons.append("under exact the run must match the baseline's primary run; it differs: "
                             + "; ".join(diff))
    v.status = "fail" if v.reasons else "pass"
    return v
