"""Judge a run another trainer made — its log, read by :mod:`harness.judge.logs` — by the harness's tiers.

``harness compare --log verl:FILE --recipe R --profile P --scale S`` judges the log against the recipe's
baseline as :mod:`harness.judge.compare` judges a run directory, with what a log cannot tell taken into account:

- **exact** is never claimed: the log comes from another implementation, whose software, machine and seed it
  does not record;
- **replay** needs the run to have trained teacher-forced on the baseline's recorded rollouts, which only the
  harness does (``harness run --tier replay``): no log carries that, so it is refused when forced;
- so a log is judged by the **statistical** tier (its training reward's late-window mean against the seeds',
  further logs given with ``--log`` being its candidate runs: the median of them all), or by **band** when
  forced; the verdict says the environment is unknown;
- throughput (tokens/s per device, verl's ``perf/throughput`` and the harness's alike) is judged only when the
  profile names the device model of one of the baseline's references; memory never (another engine).

Besides the gate, a **cross-check** (:func:`harness.judge.tiers.crosscheck`) tells per metric where the log's late-window mean
lies beyond the spread of the baseline seeds' (two-sided, family-wise alpha): where verl and the harness,
running the same recipe, differ. It is a report, not a gate.

``record-baseline --from-log`` (:func:`build_log_baseline`) records a baseline (band and statistical tiers
only) from N logs of one recipe, with each log's provenance (SHA-256, the trainer's version when it says it).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.jsonio import file_sha256
from harness.judge.baseline import (
    MEMORY_METRIC,
    THROUGHPUT_METRIC,
    default_path,
    load_baseline,
    metric_entries,
    rel_spread,
)
from harness.judge.compare import Subject, new_verdict, refusal_reasons, require_baseline_file, seal
from harness.judge.logs import TrainerLog, read_log
from harness.judge.summary import failure_reasons
from harness.judge.tiers import (
    BAND,
    EXACT,
    MEMORY,
    REPLAY,
    STATISTICAL,
    THROUGHPUT,
    TIERS,
    Context,
    Notices,
    applied_with,
    crosscheck,
    throughput_check,
)
from harness.records.base import dump
from harness.records.baseline import Policy, Throughput
from harness.records.verdict import BaselineUsed, Change, Check, CrossCheck, RunJudged, Verdict
from harness.run.rundir import utc_now

FOREIGN_TIERS = (BAND.name, STATISTICAL.name)  # what a log can be judged by (and a baseline from logs records)
REWARD = "critic/score/mean"


def _judged(log: TrainerLog) -> str:
    return f"{log.trainer} ({'version ' + log.trainer_version if log.trainer_version else 'version not in the log'})"


def choose_tiers(log: TrainerLog, forced: str | None) -> tuple[list[str], str]:
    """The tiers a log is judged by and why (a refused choice is a HarnessError naming --tier)."""
    who = f"a {log.trainer} log"
    if forced == EXACT.name:
        raise HarnessError(f"{who} is never judged exact: another implementation, its software, machine and seed "
                           "unknown", key_path="--tier", fix="leave --tier out (statistical) or use --tier band")
    if forced == REPLAY.name:
        raise HarnessError(f"{who} cannot be judged by {REPLAY.name}: it needs a run trained teacher-forced on the "
                           "baseline's recorded rollouts from its initial policy, and a log carries neither",
                           key_path="--tier", fix="leave --tier out (statistical), or replay with `harness run "
                           f"--tier {REPLAY.name}`")
    if forced == BAND.name:
        return applied_with(BAND), (f"forced with --tier {BAND.name}; {who} (environment unknown: only "
                                    "trajectories that coincide stay in a band)")
    return applied_with(STATISTICAL), (f"{who}: another trainer's free run, its environment unknown — not exact (another "
                             "implementation), not replay (a log carries no replayed rollouts)")


def _throughput(ctx: Context, profile: dict[str, Any], notices: Notices) -> list[Check]:
    """Tokens/s per device against the reference recorded on the profile's device model, if there is one."""
    refs = ctx.baseline.throughput.references
    if THROUGHPUT_METRIC not in ctx.run:
        return notices.not_judged(THROUGHPUT, THROUGHPUT_METRIC, f"throughput not checked: the log has no "
                                  f"{THROUGHPUT_METRIC}")
    model = profile["accelerator"]["model"]
    fits = [r for r in refs if profile["device_type"] != "cpu" and model.lower() in r.device_model.lower()]
    if not fits:
        have = "; ".join(r.device_model for r in refs) or "none recorded"
        why = ("the cpu profile names no CPU model" if profile["device_type"] == "cpu"
               else f"the profile's {model} has no reference")
        return notices.not_judged(THROUGHPUT, THROUGHPUT_METRIC, f"throughput not comparable: the log does not say "
                                  f"which machine ran it and {why} (the baseline's references: {have})")
    notices.append(f"throughput per device: the log's {THROUGHPUT_METRIC} against the reference on "
                   f"{fits[0].device_model}, the device model of profile {profile['name']} (the log does not say "
                   "its machine; threads and machine speed are not compared)")
    base = ctx.baseline.model_copy(update={"throughput": Throughput(references=fits[:1])})
    return throughput_check(replace(ctx, baseline=base, run_env=None, run_speed=None), notices)


def judge_logs(specs: list[str], res: Any, baseline_path: Path | None = None, *,
               forced: str | None = None) -> tuple[Verdict, list[TrainerLog]]:
    """Judge the first log (the others are its candidate runs) against the baseline of ``res``'s recipe."""
    logs = [read_log(s) for s in specs]
    log = logs[0]
    info = RunJudged(dir=log.path, recipe=res.name, profile=res.profile_name, scale=res.scale, seed=None,
                     status="logged", steps_completed=log.steps)
    v = new_verdict("refused", info, forced=forced, logs=[x.provenance() for x in logs])
    v.notices += [n for x in logs for n in x.notices]
    return seal(_judge_logs(v, logs, res, baseline_path, forced)), logs


def _judge_logs(v: Verdict, logs: list[TrainerLog], res: Any, baseline_path: Path | None,
                forced: str | None) -> Verdict:
    log = logs[0]
    if baseline_path is not None:
        require_baseline_file(Path(baseline_path))
    path = Path(baseline_path) if baseline_path else default_path(res.name, res.profile_name, res.scale)
    if not path.is_file():
        v.status = "no-baseline"
        v.notices.append(f"no baseline at {path}; record one with `harness record-baseline {res.name} --profile "
                         f"{res.profile_name} --scale {res.scale} --seeds 5` (or --from-log with logs)")
        return v
    try:
        baseline = load_baseline(path)
    except HarnessError as err:
        v.reasons.append(f"baseline unusable: {err.one_line()}")
        return v
    upto = min(log.steps, baseline.steps)
    v.baseline = BaselineUsed(path=str(path), sha256=file_sha256(path), steps=baseline.steps,
                              primary_seed=baseline.primary_seed, noise_seeds=list(baseline.noise_seeds),
                              steps_compared=upto)
    v.policy = dump(baseline.policy)
    v.reasons = refusal_reasons(Subject(res.recipe_hash, res.config["model"]["architecture"], res.profile_name,
                                        res.scale), baseline)
    if v.reasons:
        return v
    tiers, why = choose_tiers(log, forced)
    missing = [x.path for x in logs if REWARD not in x.series]
    if STATISTICAL.name in tiers and missing:
        v.reasons = [f"the log {missing[0]} has no {REWARD}, the training reward the statistical tier tests"]
        return v
    v.tier, v.tiers_applied, v.tier_reason = tiers[0], tiers, why
    env = baseline.environment
    v.changes = [Change(key="trainer", baseline="harness" if env else "unknown (a baseline from logs)",
                        run=_judged(log), blocks_exact=True),
                 Change(key="environment", baseline=(f"{env.machine.device_model}, torch {env.software.torch}"
                                                     if env else "unknown"),
                        run="unknown (not in the log)", blocks_exact=True)]
    v.notices.append(f"environment unknown: the {log.trainer} log does not record the software, machine or seed "
                     "that ran it, so the run is judged as another implementation's free run")
    if log.steps != baseline.steps:
        v.notices.append(f"compared the first {upto} steps (log {log.steps}, baseline {baseline.steps})")
    present = {n: m for n, m in baseline.metrics.items() if n in log.series}
    absent = sorted(n for n, m in baseline.metrics.items() if n not in log.series and set(m.tiers) & set(tiers))
    if absent:
        v.notices.append(f"not in the log, not judged: {len(absent)} baseline metric(s) ({', '.join(absent[:6])}"
                         f"{' …' if len(absent) > 6 else ''})")
    ctx = Context({n: {k: x for k, x in s.items() if k <= upto} for n, s in log.series.items()},
                  baseline.model_copy(update={"metrics": present}), upto,
                  candidates=[x.series for x in logs[1:]])
    wanted = baseline.policy.statistical.candidate_runs or 1
    if STATISTICAL.name in tiers and len(logs) < wanted:
        v.notices.append(f"statistical: judged on {len(logs)} run(s), the baseline's policy asks for {wanted} (give "
                         "the logs of runs with other seeds with more --log; one run's false-alarm rate is higher)")
    v.checks = [c for t in tiers for c in TIERS[t](ctx)]
    found = Notices()
    v.checks += _throughput(ctx, res.profile, found)
    found.not_judged(MEMORY, baseline.policy.memory.metric, f"memory not comparable: peak memory depends on the "
                     f"engine that ran ({log.trainer} here)")
    v.notices += found
    v.unjudged = found.unjudged
    if STATISTICAL.name in tiers:
        v.notices.append("statistical: no replay probe, so faults below the seeds' spread go unseen (a log carries "
                         "no rollouts to replay: `harness run` of the recipe adds one)")
    v.crosscheck = crosscheck(ctx)
    v.reasons = failure_reasons(v.checks)
    v.status = "fail" if v.reasons else "pass"
    return v


# ----------------------------------------------------------------------------- cross-check
def crosscheck_lines(rows: list[CrossCheck]) -> list[str]:
    """The cross-check as text lines (metric, run, seeds' centre and range, t against the bound)."""
    if not rows:
        return []
    width = max(len(r.metric) for r in rows)
    out = [f"cross-check (late-window means vs the baseline seeds', two-sided, family-wise alpha; not gated): "
           f"{sum(r.beyond for r in rows)}/{len(rows)} metric(s) beyond the seeds' spread"]
    for r in rows:
        t = "inf" if r.t is None else f"{r.t:+.2f}"
        out.append(f"  {r.metric:<{width}}  {r.run_value:.6g} vs {r.centre:.6g} "
                   f"(seeds {r.seeds_min:.6g}..{r.seeds_max:.6g})  t {t} / ±{r.bound:.2f}  "
                   + ("BEYOND the seeds' spread" if r.beyond else "within"))
    return out


# ----------------------------------------------------------------------------- baseline from logs
def build_log_baseline(specs: list[str], res: Any, *, command: str, policy: Policy) -> dict[str, Any]:
    """A baseline document (band and statistical tiers) from N logs of ``res``'s recipe; the first is primary."""
    logs = [read_log(s) for s in specs]
    if len(logs) < 2:
        raise HarnessError("a baseline needs the logs of at least 2 runs (5 for the statistical tier's olympic "
                           "mean)", key_path="--from-log", fix="give --from-log once per run")
    shas: dict[str, str] = {}
    for x in logs:
        if x.sha256 in shas:
            raise HarnessError(f"the same log given twice ({shas[x.sha256]} and {x.path})", key_path="--from-log",
                               fix="give the logs of different runs")
        shas[x.sha256] = x.path
        if x.steps != logs[0].steps:
            raise HarnessError(f"the log has {x.steps} steps, the first one {logs[0].steps}", file=x.path,
                               key_path="--from-log", fix="record from runs of the same length")
        if REWARD not in x.series:
            raise HarnessError(f"the log has no {REWARD}", file=x.path, key_path="--from-log",
                               fix="give logs that record the training reward")
    steps = logs[0].steps
    series = [{n: {k: v for k, v in s.items() if k <= steps} for n, s in x.series.items()} for x in logs]
    metrics = metric_entries(series, steps, policy, str(logs[0].path), allowed=FOREIGN_TIERS)
    mem = [max(s[MEMORY_METRIC].values()) for s in series if s.get(MEMORY_METRIC)]
    cfg = res.config
    return {
        "schema_version": 2,
        "recipe": {"name": res.name, "hash": res.recipe_hash, "config_hash": res.config_hash},
        "profile": res.profile_name, "scale": res.scale,
        "architecture": cfg["model"]["architecture"], "dtype": cfg["model"]["dtype"],
        "steps": steps, "created_utc": utc_now(), "command": command,
        "primary_seed": None, "noise_seeds": [None] * (len(logs) - 1),
        "environment": None,
        "policy": dump(policy),
        "metrics": metrics,
        "throughput": {"references": []},
        "memory": {"value": statistics.median(mem) if mem else 0.0, "seed_values": mem,
                   "relative_spread": rel_spread(mem)},
        "runs": [],
        "logs": [x.provenance() for x in logs],
    }

