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

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, HarnessError
from harness.jsonio import file_sha256, load_json_strict, write_json_atomic
from harness.judge import candidates, probe
from harness.judge.baseline import default_path, load_baseline, load_series
from harness.judge.summary import WARM_START, failure_reasons, summary_line
from harness.judge.tiers import (
    EXACT,
    REPLAY,
    STATISTICAL,
    TIER_ORDER,
    TIERS,
    Context,
    applied_with,
    crosscheck,
    evaluate,
)
from harness.records.base import dump
from harness.records.baseline import Baseline
from harness.records.run import Manifest
from harness.records.verdict import (
    BaselineUsed,
    Candidate,
    Change,
    GroupCount,
    ProbeJudged,
    RunJudged,
    Verdict,
    VerdictStatus,
)
from harness.run import environment
from harness.run.rundir import MARKER, utc_now
from harness.schema import check, schema_errors

VERDICT_FILE = "verdict.json"


# ----------------------------------------------------------------------------- eligibility
@dataclass(frozen=True)
class Subject:
    """What a refusal compares: the recipe, config, profile and scale a run (or another trainer's log) ran."""

    recipe_hash: str
    architecture: dict[str, Any]
    profile: str
    scale: str
    replayed: bool = False


def subject_of(m: Manifest) -> Subject:
    return Subject(m.recipe.hash, m.architecture, m.profile, m.scale, m.replay is not None)


def refusal_reasons(run: Subject, baseline: Baseline) -> list[str]:
    out = []
    if run.recipe_hash != baseline.recipe.hash:
        out.append(f"recipe hash {run.recipe_hash[:12]} differs from the baseline's "
                   f"{baseline.recipe.hash[:12]} (the recipe changed: re-record the baseline)")
    if run.architecture != baseline.architecture:
        out.append("model architecture differs from the baseline's")
    if run.profile != baseline.profile and not run.replayed:
        out.append(f"profile '{run.profile}' differs from the baseline's '{baseline.profile}' (another "
                   f"profile can only replay it: --tier {REPLAY.name})")
    if run.scale != baseline.scale:
        out.append(f"scale '{run.scale}' differs from the baseline's '{baseline.scale}'")
    return out


def environment_changes(manifest: Manifest, baseline: Baseline) -> list[Change]:
    if baseline.environment is None:  # a baseline from another trainer's logs (harness.judge.foreign)
        return [Change(key="environment", baseline="unknown (a baseline from trainer logs)", run="this run's",
                       blocks_exact=True)]
    return environment.changes(environment.summary(manifest), baseline.environment)


def blocking_changes(manifest: Manifest, baseline: Baseline) -> list[str]:
    return [environment.change_text(c) for c in environment_changes(manifest, baseline) if c.blocks_exact]


def seed_difference(manifest: Manifest, baseline: Baseline) -> list[str]:
    if baseline.primary_seed is None:
        return [f"seed {manifest.seed} vs the baseline's, unknown (trainer logs)"]
    if manifest.seed != baseline.primary_seed:
        return [f"seed {manifest.seed} vs the baseline's {baseline.primary_seed}"]
    return []


def run_differences(manifest: Manifest, baseline: Baseline) -> list[str]:
    """What the run itself changed relative to the baseline's primary run (seed, overrides, config)."""
    out = seed_difference(manifest, baseline)
    if manifest.overrides:
        out.append("overrides " + ", ".join(f"{o.key}={o.value}" for o in manifest.overrides))
    elif manifest.recipe.config_hash != baseline.recipe.config_hash:
        out.append("resolved config hash differs")
    return out


def choose_tiers(manifest: Manifest, baseline: Baseline, forced: str | None) -> tuple[list[str], str]:
    blocking = blocking_changes(manifest, baseline)
    seed, diff = seed_difference(manifest, baseline), run_differences(manifest, baseline)
    if manifest.replay:
        if forced not in (None, REPLAY.name):
            raise _Refusal(f"a replay run is judged by the {REPLAY.name} tier only, not --tier {forced}")
        why = "replayed the baseline's recorded rollouts"
        if blocking:
            why += " (not exact-eligible: " + "; ".join(blocking) + ")"
        return applied_with(REPLAY), why
    if forced == REPLAY.name:
        raise _Refusal(f"the run did not replay the baseline's rollouts; run it with `harness run … --tier "
                       f"{REPLAY.name}`")
    if forced == EXACT.name:
        if blocking:
            raise _Refusal(f"--tier {EXACT.name} needs the baseline's environment; differs: {'; '.join(blocking)}")
        why = f"forced with --tier {EXACT.name}" + (f" (run differs: {'; '.join(diff)})" if diff else "")
        return applied_with(EXACT), why
    if forced:
        return applied_with(TIERS[forced]), f"forced with --tier {forced}"
    if not blocking and not seed:
        why = "same environment and seed, deterministic"
        if diff:
            why += f"; {'; '.join(diff)}: judged bitwise like any other change"
        return applied_with(EXACT), why
    return applied_with(STATISTICAL), "not exact-eligible: " + "; ".join(blocking + diff)


class _Refusal(Exception):
    pass


def warm_start_finding(manifest: Manifest, baseline: Baseline) -> tuple[str | None, str | None]:
    """(reason, notice) about the run's warm-start weights against the baseline primary run's.

    With the baseline's environment, seed and settings the warm start is the same bits, so a different digest
    is a finding (the cache entry was changed or planted, or the warm start trains differently now); where
    anything else differs it is expected and only noted.
    """
    ref, ws = baseline.warm_start, manifest.warm_start
    if not ref or not ws or manifest.replay:
        return None, None
    digest = ws.weights_sha256
    if digest is None:
        return None, f"{WARM_START} not compared: the run's manifest does not record its weights' digest"
    if digest == ref.weights_sha256:
        return None, None
    where = f"loaded from the warm-start cache entry {ws.path}" if ws.cached else f"trained now into {ws.path}"
    text = (f"{WARM_START}: the run's warm-start weights (sha256 {digest[:12]}, {where}) differ from the "
            f"baseline's ({ref.weights_sha256[:12]})")
    moved = blocking_changes(manifest, baseline) + run_differences(manifest, baseline)
    if moved:
        return None, f"{text}, as expected where the run differs ({'; '.join(moved)})"
    fix = (f"delete {ws.path} and its .json (or set HARNESS_CACHE to an empty directory) and run again"
           if ws.cached else "the warm start trains to other weights than when the baseline was recorded: "
                             "re-record the baseline if that is intended")
    return f"{text} although the environment, seed and settings are the baseline's (fix: {fix})", None


# ----------------------------------------------------------------------------- what more the verdict needs
@dataclass(frozen=True)
class Needs:
    """What a statistical verdict lacks and ``harness run`` can train (decided by the judge, trained by the run
    layer): candidate runs of other seeds and the replay probe."""

    candidate_seeds: list[int] = field(default_factory=list)
    probe: probe.Wanted | None = None

    def __bool__(self) -> bool:
        return bool(self.candidate_seeds) or self.probe is not None


def _add_candidates(v: Verdict, ctx: Context, run_dir: Path, manifest: Manifest, baseline: Baseline,
                    wanted: int | None) -> list[int]:
    """Judge the run with its candidate runs (other seeds, :mod:`harness.judge.candidates`); say when the
    baseline's policy asks for more than there are. Returns the seeds still missing (``wanted``: the runs to
    judge together, the policy's when None)."""
    found = candidates.find(run_dir, manifest)
    v.notices += found.notices
    ctx.candidates = [load_series(d) for _, d in found.runs]
    v.candidates = [Candidate(seed=seed, dir=str(d)) for seed, d in found.runs]
    policy_wants = baseline.policy.statistical.candidate_runs or 1
    want = policy_wants if wanted is None else wanted
    if len(found.runs) + 1 < want:
        v.notices.append(f"statistical: judged on {len(found.runs) + 1} run(s), the baseline's policy asks for "
                         f"{policy_wants} (`harness run` trains the candidates; a single run's false-alarm rate is "
                         "higher: baselines/README.md)")
    have = {seed for seed, _ in found.runs}
    taken = {baseline.primary_seed, *baseline.noise_seeds} - {None}
    todo = [s for s in candidates.candidate_seeds(manifest.seed, want, taken) if s not in have]  # type: ignore[arg-type]
    return todo[:max(0, want - 1 - len(have))]


def _add_probe(v: Verdict, ctx: Context, run_dir: Path, manifest: Manifest, baseline: Baseline,
               used: BaselineUsed) -> probe.Wanted | None:
    """Judge the run's replay probe (:mod:`harness.judge.probe`) by the replay tier; say when there is none,
    and return the probe wanted when it can be trained."""
    why = probe.unavailable(baseline, manifest.runtime.kind)
    found = probe.find(run_dir, manifest, used.sha256) if not why else probe.Probe(None, None, [])
    v.notices += found.notices
    if found.dir is None or found.manifest is None:
        v.notices.append("statistical: no replay probe, so faults below the seeds' spread go unseen ("
                         + (why or "`harness run` trains it into RUN_DIR/" + probe.PROBE_DIR + "/") + ")")
        if why or baseline.primary_seed is None:
            return None
        return probe.Wanted(Path(used.path), baseline.primary_seed, probe.probe_steps(baseline))
    m = found.manifest
    upto = min(m.steps.completed, probe.probe_steps(baseline))
    pctx = Context(load_series(found.dir), baseline, upto, environment.summary(m), m.dtype, ctx.baseline_dtype)
    v.checks += REPLAY(pctx)
    v.tiers_applied = [*v.tiers_applied, REPLAY.name]
    v.replay_probe = ProbeJudged(dir=str(found.dir), steps_compared=upto)
    return None


def _bitwise_reproduced(ctx: Context) -> bool:
    """Every exact-gated metric of the run equals the baseline's primary run at every step, bit for bit.

    Exact-eligibility predicts whether an environment *can* reproduce the baseline; a run that did is
    judged exact whatever the prediction (e.g. the README's container: another Python build and image
    than the local run that recorded the baseline, the same wheels and numerics pin, the same bits).
    """
    checks = EXACT(ctx)
    return bool(checks) and all(c.passed for c in checks)


# ----------------------------------------------------------------------------- verdict
def new_verdict(status: VerdictStatus, run: RunJudged, *, forced: str | None = None, **given: Any) -> Verdict:
    """A verdict being filled in: :func:`seal` gives it its counts and summary line."""
    fields: dict[str, Any] = dict(tier=None, tiers_applied=[], tier_reason="", baseline=None, policy=None,
                                  overrides=[], fault_injection=None, reasons=[], notices=[], changes=[], counts={},
                                  checks=[], summary_line="-")
    return Verdict(schema_version=1, status=status, forced_tier=forced, created_utc=utc_now(), run=run,
                   **{**fields, **given})


def counts(v: Verdict) -> dict[str, GroupCount]:
    out: dict[str, GroupCount] = {}
    for c in v.checks:
        g = out.get(c.group, GroupCount(checks=0, failed=0))
        out[c.group] = GroupCount(checks=g.checks + 1, failed=g.failed + (not c.passed))
    return out


def seal(v: Verdict) -> Verdict:
    """The verdict with its counts and summary line (call once it is complete)."""
    v.counts = counts(v)
    v.summary_line = summary_line(v)
    return v


def exit_code(v: Verdict) -> int:
    return {"pass": EXIT_OK, "no-baseline": EXIT_OK, "fail": EXIT_FINDINGS}.get(v.status, EXIT_USAGE)


def judge(run_dir: Path, res: Any = None, baseline_path: Path | None = None, *, tier: str | None = None,
          write: bool = True, candidates_wanted: int | None = None) -> Verdict:
    """Judge ``run_dir`` and write ``verdict.json`` there (``res`` is accepted for the caller's convenience;
    everything is read from the run's own manifest)."""
    verdict, _ = judge_needs(Path(run_dir), baseline_path, tier, candidates_wanted)
    if write:
        write_verdict(run_dir, verdict)
    return verdict


def write_verdict(run_dir: Path, verdict: Verdict) -> None:
    """``run_dir/verdict.json``, checked against its schema, written atomically."""
    doc = dump(verdict)
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


def _run_info(run_dir: Path, manifest: Any) -> RunJudged:
    """What a verdict says of the run, from whatever of its manifest can be read (it may fail its schema)."""
    info: dict[str, Any] = {"dir": str(run_dir), "recipe": None, "profile": None, "scale": None, "seed": None,
                            "status": None, "steps_completed": None}
    if isinstance(manifest, dict):
        recipe, steps = manifest.get("recipe"), manifest.get("steps")
        info.update(recipe=recipe.get("name") if isinstance(recipe, dict) else None,
                    profile=manifest.get("profile"), scale=manifest.get("scale"), seed=manifest.get("seed"),
                    status=manifest.get("status"),
                    steps_completed=steps.get("completed") if isinstance(steps, dict) else None)
        info = {k: v if (v is None or isinstance(v, (str, int)) and not isinstance(v, bool)) else None
                for k, v in info.items()}
        if isinstance(info["seed"], int) and info["seed"] < 0 or isinstance(info["steps_completed"], int) \
                and info["steps_completed"] < 0:
            info["seed"] = info["steps_completed"] = None
    return RunJudged.model_validate(info)


def judge_needs(run_dir: Path, baseline_path: Path | None, forced: str | None,
                candidates_wanted: int | None = None) -> tuple[Verdict, Needs]:
    """The verdict of ``run_dir`` (sealed) and what more it needs (:class:`Needs`: nothing unless the statistical
    tier decided and candidates or the probe are missing)."""
    v, needs = _judge(run_dir, baseline_path, forced, candidates_wanted)
    return seal(v), needs


def _judge(run_dir: Path, baseline_path: Path | None, forced: str | None,
           candidates_wanted: int | None) -> tuple[Verdict, Needs]:
    if baseline_path is not None:
        require_baseline_file(Path(baseline_path))
    if forced is not None and forced not in TIERS:
        raise HarnessError(f"unknown tier '{forced}'", key_path="--tier", fix=f"use one of {', '.join(TIER_ORDER)}")
    mpath = run_dir / "manifest.json"
    if not mpath.is_file():
        raise HarnessError("not a run directory (no manifest.json)", file=str(run_dir), fix="give a run directory")
    doc = load_json_strict(mpath)
    errs = schema_errors(doc, "manifest")
    if errs:
        ptr, msg, fix = errs[0]
        return new_verdict("refused", _run_info(run_dir, doc), forced=forced, reasons=[
            f"{mpath}::{ptr}: manifest fails its schema: {msg} (fix: {fix})"]), Needs()
    manifest = Manifest.model_validate(doc)
    v = new_verdict("refused", _run_info(run_dir, doc), forced=forced)
    v.overrides, v.fault_injection = list(manifest.overrides), manifest.fault_injection
    if manifest.fault_injection:
        v.notices.append("fault injected for testing: " + ", ".join(
            f"{k}={val}" for k, val in dump(manifest.fault_injection).items()))
    if manifest.status != "complete" or (run_dir / MARKER).exists():
        v.reasons.append(f"run is not complete (status {manifest.status}"
                         f"{', INCOMPLETE marker present' if (run_dir / MARKER).exists() else ''}); "
                         "only finished runs are compared")
        return v, Needs()
    replayed = manifest.replay.baseline if manifest.replay else None
    path = Path(baseline_path) if baseline_path else Path(replayed) if replayed else default_path(
        manifest.recipe.name, manifest.profile, manifest.scale)
    if not path.is_file():
        v.status = "no-baseline"
        v.notices.append(f"no baseline at {path}; record one with `harness record-baseline "
                         f"{manifest.recipe.name} --profile {manifest.profile} --scale {manifest.scale} --seeds 5`")
        return v, Needs()
    try:
        baseline = load_baseline(path)
    except HarnessError as err:  # a broken baseline is a refusal with its pointer, never a half verdict
        v.reasons.append(f"baseline unusable: {err.one_line()}")
        return v, Needs()
    run = load_series(run_dir)
    upto = min(manifest.steps.completed, baseline.steps)
    used = BaselineUsed(path=str(path), sha256=file_sha256(path), steps=baseline.steps,
                        primary_seed=baseline.primary_seed, noise_seeds=list(baseline.noise_seeds),
                        steps_compared=upto)
    v.baseline, v.policy = used, dump(baseline.policy)
    reasons = refusal_reasons(subject_of(manifest), baseline)
    if reasons:
        v.reasons = reasons
        return v, Needs()
    try:
        tiers, why = choose_tiers(manifest, baseline, forced)
    except _Refusal as err:
        v.reasons = [str(err)]
        return v, Needs()
    if manifest.steps.completed != baseline.steps:
        v.notices.append(f"compared the first {upto} steps (run {manifest.steps.completed}, "
                         f"baseline {baseline.steps})")
    v.tier, v.tiers_applied, v.tier_reason = tiers[0], tiers, why
    v.changes = environment_changes(manifest, baseline)
    ctx = Context(run, baseline, upto, environment.summary(manifest), manifest.dtype, baseline.dtype,
                  manifest.calibration.speed_index if manifest.calibration else None)
    if forced is None and tiers == applied_with(STATISTICAL) and not seed_difference(manifest, baseline) \
            and _bitwise_reproduced(ctx):
        v.tier, v.tiers_applied = EXACT.name, applied_with(EXACT)
        v.tier_reason = ("bitwise equal to the baseline's primary run although " + why
                         + ": these differences did not change a bit of the gated metrics")
        tiers = v.tiers_applied
    needs = Needs()
    seeds: list[int] = []
    if v.tier == STATISTICAL.name:
        seeds = _add_candidates(v, ctx, run_dir, manifest, baseline, candidates_wanted)
    moved = [c.key for c in v.changes if c.blocks_exact] + (["replay run (no sampling)"] if manifest.replay else [])
    v.checks, notices = evaluate(ctx, tiers, throughput=not manifest.replay, memory_differs=moved)
    v.notices += notices
    v.unjudged = notices.unjudged or None
    if v.tier == STATISTICAL.name:
        needs = Needs(seeds, _add_probe(v, ctx, run_dir, manifest, baseline, used))
    if baseline.environment is None:  # a harness run against another trainer's logs: where they differ
        v.crosscheck = crosscheck(ctx)
    v.reasons = failure_reasons(v.checks)
    warm_reason, warm_notice = warm_start_finding(manifest, baseline)
    v.reasons += [warm_reason] if warm_reason else []
    v.notices += [warm_notice] if warm_notice else []
    if v.tier == EXACT.name and any(c.group == EXACT.name and not c.passed for c in v.checks):
        diff = run_differences(manifest, baseline)
        if diff:
            v.reasons.append(f"under {EXACT.name} the run must match the baseline's primary run; it differs: "
                             + "; ".join(diff))
    v.status = "fail" if v.reasons else "pass"
    return v, needs
