"""The comparison tiers (a registry) and the whole-run checks (throughput, memory).

- ``exact`` — bitwise equality of every gated non-timing metric at every compared step.
- ``replay`` — the run trained teacher-forced on the baseline's recorded rollouts
  (:mod:`harness.core.replay`); every training-side metric per step within
  ``max(k_noise · c · noise(s), rtol_floor · c · rms(ref), atol)`` over the first
  ``horizon_steps``, where ``noise(s)`` is the largest distance up to step ``s + 2`` between the
  baseline and the same replay in float64 (measured when the baseline is recorded: the rounding
  error any fp32 implementation makes), and ``c`` is how much coarser the run's dtype rounds than
  the baseline's (unit roundoff ratio: 1 for fp32 on an fp32 baseline, 2^16 for bf16). Seed spread
  plays no part. Even teacher-forced, training amplifies a rounding difference step by step, so the
  replay is sharp over the early steps — where a changed learning rate, loss or advantage shows at
  once — and later steps, where trajectories of two correct implementations separate, are not
  gated.
- ``band`` — per step ``|run - ref| <= max(atol, rtol·|ref|, k·noise)`` with the seed noise floor;
  only meaningful where trajectories can coincide (forced with ``--tier band``, or as diagnostics
  under ``exact``).
- ``statistical`` — late-window means of convergence metrics against the seeds' distribution
  (:mod:`harness.judge.stats`: olympic mean, one-sided t-test, Bonferroni over metrics), for the
  median of the run and its candidate runs (:mod:`harness.judge.candidates`); the verdict adds its
  replay probe's ``replay`` checks (:mod:`harness.judge.probe`).

Throughput is judged only against a reference from the same device model and thread count;
otherwise the verdict says the numbers are not comparable (a notice, never a FAIL). A machine
whose speed calibration is slower than the reference's gets a floor lowered to match
(:data:`MIN_SPEED_SCALE`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.judge import stats
from harness.judge.series import (
    BAND_EXCLUDED_PREFIXES,
    BAND_EXCLUDED_SUFFIXES,
    REPLAY_EXCLUDED_PREFIXES,
    is_timing,
    per_step_scaled,
    quantile,
    stat_spec,
    statistical_window,
    steady_speed,
    window_mean,
)
from harness.records.baseline import (
    BandPolicy,
    Baseline,
    Environment,
    MetricSeries,
    PerStepThroughput,
    ThroughputPolicy,
    ThroughputRef,
)
from harness.records.verdict import Check, CrossCheck, Unjudged
from harness.registry import Registry


@dataclass
class Context:
    """What a tier needs: the run's series, the baseline, the compared steps and the run's environment."""

    run: dict[str, dict[int, float]]
    baseline: Baseline
    upto: int
    run_env: Environment | None = None
    dtype: str = "float32"  # the run's model dtype
    baseline_dtype: str = "float32"
    run_speed: float | None = None  # the run's machine speed index (manifest calibration)
    candidates: list[dict[str, dict[int, float]]] = field(default_factory=list)  # other seeds' series (statistical)

    def ref_steps(self, name: str) -> list[tuple[int, float, float, list[float | None]]]:
        """(step, ref value, noise std, noise values) for the compared steps of a baseline metric."""
        m = self.baseline.metrics[name]
        return [(k, v, n, [row[i] for row in m.noise_values])
                for i, (k, v, n) in enumerate(zip(m.steps, m.values, m.noise_std)) if k <= self.upto]


TierFn = Callable[[Context], list[Check]]


@dataclass(frozen=True)
class Tier:
    """A registered tier: its checks, the metrics it gates, and how the summary line says a metric passed."""

    name: str
    checks: TierFn
    gates: Callable[[str], bool]  # which metrics it gates (each baseline metric records its tiers)
    passes: str  # "<n>/<m> gated metrics <passes>"
    needs_replay: bool = False  # judged only on a run that trained on the baseline's recorded rollouts
    per_step: bool = True  # its checks name the steps that failed

    def __call__(self, ctx: Context) -> list[Check]:
        return self.checks(ctx)


# The registries: tiers (strictest first: the order they are registered in) and every check group a verdict or
# a gate may hold (the tiers, then the whole-run checks, then the gate's own). The CLI's --tier choices, the
# summary line, the report, the gate's JUnit and Markdown and the certificate's groups all come from here.
TIERS: Registry[Tier] = Registry("tier", key_path="--tier")
GROUPS: Registry[str] = Registry("check group")  # name -> kind: "tier", "whole-run" or "gate"


def tier(name: str, *, gates: Callable[[str], bool], passes: str, needs_replay: bool = False,
         per_step: bool = True) -> Callable[[TierFn], Tier]:
    """Decorator: register a tier's checks under ``name`` (a name twice is a ValueError); it becomes a
    :class:`Tier`."""
    def deco(fn: TierFn) -> Tier:
        t = Tier(name, fn, gates, passes, needs_replay, per_step)
        GROUPS.register(name)("tier")
        return TIERS.register(name)(t)
    return deco


def check_group(name: str, kind: str) -> str:
    """Register a check group that is not a tier (``kind``: "whole-run" or "gate"); returns its name."""
    GROUPS.register(name)(kind)
    return name


def tier_names() -> list[str]:
    return list(TIERS)


def check_group_names() -> list[str]:
    return list(GROUPS)


def certifiable_tier_names() -> list[str]:
    """Tiers a certification suite may ask for: the free runs' tiers, and replay (the entry's runs then replay the
    reference baseline's recorded rollouts: a one-device reference judges a node of another world size)."""
    return list(TIERS)


def applied_with(t: Tier) -> list[str]:
    """The tiers whose checks run when ``t`` decides: ``t`` and every looser one (a replay tier alone: the other
    tiers judge free runs)."""
    if t.needs_replay:
        return [t.name]
    order = list(TIERS.values())
    return [x.name for x in order[order.index(t):] if not x.needs_replay]


def metric_tiers(name: str) -> list[str]:
    """Tiers a metric is gated in (recorded into each baseline metric): every non-timing metric is exact; most
    are replayed and banded too."""
    return [] if is_timing(name) else [t.name for t in TIERS.values() if t.gates(name)]


def make_check(group: str, metric: str, step: int | None, run_value: float | None, ref_value: float | None,
               tolerance: float | None, passed: bool, steps_compared: int = 0, failing_steps: list[int] | None = None,
               detail: str = "") -> Check:
    return Check(group=group, metric=metric, step=step, run_value=run_value, ref_value=ref_value,
                 tolerance=tolerance, passed=passed, steps_compared=steps_compared,
                 failing_steps=failing_steps or [], detail=detail)


def fmt(x: float | None) -> str:
    return "missing" if x is None else repr(x) if not math.isfinite(x) else f"{x:.6g}"


def _full(x: float | None) -> str:
    return "missing" if x is None else repr(x)


def bitwise_equal(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))


def gated(ctx: Context, t: Tier) -> list[str]:
    return sorted(n for n, m in ctx.baseline.metrics.items() if t.name in m.tiers)


def _exact(ctx: Context) -> list[Check]:
    out = []
    for name in gated(ctx, EXACT):
        run = ctx.run.get(name, {})
        rows = ctx.ref_steps(name)
        bad = [k for k, v, _, _ in rows if not bitwise_equal(run.get(k), v)]
        k0 = bad[0] if bad else (rows[-1][0] if rows else None)
        ref = dict((k, v) for k, v, _, _ in rows)
        run_at, ref_at = (run.get(k0), ref.get(k0)) if k0 is not None else (None, None)
        detail = ("bitwise equal" if not bad else
                  f"first difference at step {k0}: {_full(run_at)} vs {_full(ref_at)}"
                  f" ({len(bad)}/{len(rows)} steps differ)")
        out.append(make_check(EXACT.name, name, k0, run_at, ref_at, 0.0, not bad, len(rows), bad, detail))
    return out


EXACT = tier("exact", gates=lambda name: True, passes="equal")(_exact)


def _per_step(ctx: Context, group: str, name: str, tol_at: Callable[[int, float], float], allowed: int,
              note: str = "") -> Check:
    """Per-step deviation check of one metric: the worst step and every step outside its tolerance."""
    run = ctx.run.get(name, {})
    rows = ctx.ref_steps(name)
    bad: list[int] = []
    worst: tuple[float, int | None, float | None, float | None, float | None] = (-1.0, None, None, None, None)
    for i, (k, v, _, _) in enumerate(rows):
        tol = tol_at(i, v)
        r = run.get(k)
        dev = abs(r - v) if r is not None and math.isfinite(r) else math.inf
        ratio = dev / tol if tol > 0 else (0.0 if dev == 0 else math.inf)
        if not dev <= tol:
            bad.append(k)
        if ratio > worst[0]:
            worst = (ratio, k, r, v, tol)
    ok = len(bad) <= allowed and bool(rows)
    _, k_worst, r_worst, v_worst, tol_worst = worst
    detail = (f"{len(bad)}/{len(rows)} steps outside the tolerance (allowed {allowed})"
              + (f"; first at step {bad[0]}" if bad else "")
              + f"; worst at step {k_worst}: {fmt(r_worst)} vs {fmt(v_worst)} ± {fmt(tol_worst)}" if rows
              else "no steps to compare")
    k_report = bad[0] if bad else k_worst
    r_report = run.get(bad[0]) if bad else r_worst
    v_report = dict((kk, vv) for kk, vv, _, _ in rows).get(bad[0]) if bad else v_worst
    return make_check(group, name, k_report, r_report, v_report, tol_worst, ok, len(rows), bad, detail + note)


def noise_floor(stds: list[float], i: int, window: int) -> float:
    return max(stds[max(0, i - window): i + window + 1], default=0.0)


# The fp64 replay's distance grows in jumps: a ratio crossing a clip boundary or a near-tie flipping
# moves a metric by far more than a rounding error, at the step where that happens. Another correct
# implementation meets the same events, but not necessarily at the same step: measured, an H200 fp32
# replay of the CPU baseline crossed one at step 4 (kl_loss off by 2.7e-6) where the fp64 replay crossed
# it at step 5 (2.7e-6; 2e-9 before), a 22x miss of a tolerance built from steps 1-4 only. So a step's
# tolerance also takes the next EVENT_LEAD steps' distances. Faults still show at steps 1-3: their
# deviations are orders of magnitude above any step's rounding distance (bench/verdict_power.py --replay).
EVENT_LEAD = 2


def replay_tolerances(ctx: Context, name: str) -> tuple[Callable[[int, float], float], int]:
    """Per-step replay tolerance of one metric (see the module docstring), and how many of the compared
    steps it is tighter than the metric's own RMS (the steps on which the replay can still tell)."""
    pol, rep = ctx.baseline.policy.replay, ctx.baseline.replay
    rows = ctx.ref_steps(name)
    noise = [x if x is not None else 0.0 for x in (rep.noise.get(name, []) if rep else [])]
    # running maximum up to EVENT_LEAD steps ahead: see EVENT_LEAD
    envelope = [max(noise[:i + 1 + EVENT_LEAD], default=0.0) for i in range(len(rows))]
    vals = [v for _, v, _, _ in rows if math.isfinite(v)]
    rms = math.sqrt(math.fsum(v * v for v in vals) / len(vals)) if vals else 0.0
    u = pol.unit_roundoff
    coarser = max(1.0, u.get(ctx.dtype, max(u.values())) / u.get(ctx.baseline_dtype, u["float32"]))
    atol = pol.atol.get(name, pol.atol.get("*", 0.0)) * (pol.coarse_atol_factor if coarser > 1 else 1.0)
    tol = [max(pol.k_noise * coarser * e, pol.rtol_floor * coarser * rms, atol) for e in envelope]
    return (lambda i, v: tol[i]), sum(t < rms for t in tol)


def _replay(ctx: Context) -> list[Check]:
    rep = ctx.baseline.replay
    if not rep:
        return []
    horizon = min(ctx.upto, ctx.baseline.policy.replay.horizon_steps)
    within = Context(ctx.run, ctx.baseline, horizon, ctx.run_env, ctx.dtype, ctx.baseline_dtype)
    out = []
    for name in rep.metrics:
        if name not in ctx.baseline.metrics:
            continue
        tol, telling = replay_tolerances(within, name)
        out.append(_per_step(within, REPLAY.name, name, tol, 0,
                             f"; the first {horizon} steps gated (later ones diverge chaotically even "
                             f"teacher-forced); tolerance below the metric's RMS on {telling} of them"))
    return out


REPLAY = tier("replay", gates=lambda name: not name.startswith(REPLAY_EXCLUDED_PREFIXES),
              passes="within replay tolerance", needs_replay=True)(_replay)


def band_tolerance(spec: MetricSeries, pol: BandPolicy, stds: list[float]) -> Callable[[int, float], float]:
    """The band's allowed deviation at the i-th step of a metric whose reference there is v (``stds``: the noise
    floor's per-step std, :func:`noise_floor` takes the window's largest)."""
    rtol = pol.rtol if spec.rtol is None else spec.rtol
    atol = pol.atol if spec.atol is None else spec.atol
    return lambda i, v: max(atol, rtol * abs(v), pol.k_noise * noise_floor(stds, i, pol.noise_window))


def _band(ctx: Context) -> list[Check]:
    pol = ctx.baseline.policy.band
    out = []
    for name in gated(ctx, BAND):
        stds = [n for _, _, n, _ in ctx.ref_steps(name)]
        allowed = pol.failures_per_50_steps * math.ceil(len(stds) / 50)
        out.append(_per_step(ctx, BAND.name, name, band_tolerance(ctx.baseline.metrics[name], pol, stds), allowed))
    return out


BAND = tier("band", gates=lambda name: not (name.endswith(BAND_EXCLUDED_SUFFIXES)
                                            or name.startswith(BAND_EXCLUDED_PREFIXES)),
            passes="within band")(_band)


def seed_series(ctx: Context, name: str) -> list[dict[int, float]]:
    """Every recorded seed's series of a baseline metric: the primary seed's, then the noise seeds'."""
    spec = ctx.baseline.metrics[name]
    out = [dict(zip(spec.steps, spec.values))]
    out += [{k: v for k, v in zip(spec.steps, row) if v is not None} for row in spec.noise_values]
    return out


def _statistical(ctx: Context) -> list[Check]:
    """Late-window means against the seeds' (:mod:`harness.judge.stats`); with candidate runs
    (:mod:`harness.judge.candidates`) the median of the run's and theirs, held to the same bound. Which metrics are tested, which way
    and on which scale is this code's rule (:func:`stat_spec`), not the baseline's: a baseline recorded under an
    older rule is judged by the current one; it only supplies the seeds' series."""
    pol = ctx.baseline.policy.statistical
    w = statistical_window(pol.window_fraction, ctx.upto)
    specs = {n: s for n in gated(ctx, STATISTICAL) if (s := stat_spec(n)) is not None}
    names = list(specs)
    out = []
    for name in names:
        direction, transform, floor = specs[name]
        raw = [m for m in (window_mean(s, ctx.upto, w) for s in seed_series(ctx, name)) if m is not None]
        if not raw:
            continue
        runs = [_run_window_mean(series.get(name, {}), ctx.upto, w) for series in [ctx.run, *ctx.candidates]]
        finite = [v for v in runs if v is not None]
        scale = stats.applicable_transform(transform, raw + finite)
        tf = stats.TRANSFORMS[scale]
        seed_means = [tf(m) for m in raw]
        x = _median_of_runs([None if v is None else tf(v) for v in runs], direction)
        alpha = stats.per_test_alpha(pol.alpha, len(names), direction)
        # the median of K runs is held to the bound of one run (not narrowed as for a normal median: the reward's
        # lower tail is heavier, and narrowing gave back the false alarms the median removes, baselines/README.md)
        bound = stats.prediction_bound(seed_means, alpha, pol.practical_floor if floor is None else floor)
        short = stats.shortfall(x, bound.centre, direction) if x is not None else math.inf
        ok = short <= bound.allowed
        on = "" if scale == "identity" else f" ({scale} scale)"
        what = (f"mean of the last {w} steps {fmt(runs[0])}" if len(runs) == 1 else
                f"median of {len(runs)} runs' means of the last {w} steps (this run {fmt(runs[0])}, candidates "
                f"{', '.join(fmt(v) for v in runs[1:])})")
        detail = (f"{what} vs seeds' {fmt(min(raw))}..{fmt(max(raw))}{on}: "
                  f"{fmt(x)} vs olympic mean {fmt(bound.centre)} (sd {fmt(bound.sd)}, n {bound.n}, {direction}, "
                  f"alpha {alpha:.3g}); "
                  f"{'no value' if x is None else ('off by ' + fmt(short) if short > 0 else 'not worse')} "
                  f"(allowed {fmt(bound.allowed)})")
        out.append(make_check(STATISTICAL.name, name, ctx.upto, x, bound.centre, bound.allowed, ok, len(seed_means),
                              [] if ok else [ctx.upto], detail))
    return out


STATISTICAL = tier("statistical", gates=lambda name: stat_spec(name) is not None, passes="not worse",
                   per_step=False)(_statistical)
THROUGHPUT = check_group("throughput", "whole-run")
MEMORY = check_group("memory", "whole-run")
CKPT_RESUME = check_group("ckpt-resume", "gate")  # the gate's N straight vs N/2 + resume N/2, bitwise
TIER_ORDER = tuple(TIERS)  # strictest first


def crosscheck(ctx: Context) -> list[CrossCheck]:
    """Per metric of the band tier: the run's late-window mean against the seeds' (two-sided t, Bonferroni over
    the metrics at the statistical policy's alpha); ``beyond`` where it lies outside the seeds' spread."""
    pol = ctx.baseline.policy.statistical
    w = statistical_window(pol.window_fraction, ctx.upto)
    names = [n for n in gated(ctx, BAND) if n in ctx.run]
    rows = []
    for name in names:
        refs = [m for s in seed_series(ctx, name)
                if (m := window_mean({k: x for k, x in s.items() if k <= ctx.upto}, ctx.upto, w)) is not None]
        x = _run_window_mean(ctx.run[name], ctx.upto, w)
        if x is None or len(refs) < 2:
            continue
        centre, sd, n = stats.reference_stats(refs)
        t = stats.t_statistic(x, refs)
        crit = stats.t_critical(pol.alpha / (2 * len(names)), max(1, n - 1))
        rows.append(CrossCheck(metric=name, run_value=x, centre=centre, sd=sd, seeds_min=min(refs),
                               seeds_max=max(refs), n=len(refs), t=t if math.isfinite(t) else None, bound=crit,
                               beyond=not abs(t) <= crit, window=w))
    return rows


def _run_window_mean(series: dict[int, float], upto: int, w: int) -> float | None:
    """A run's late-window mean, or None when it has no values there or any value is not finite."""
    run = {k: v for k, v in series.items() if k <= upto}
    return window_mean(run, upto, w) if run and all(math.isfinite(v) for v in run.values()) else None


def _median_of_runs(values: list[float | None], direction: str) -> float | None:
    """The median of the runs' values, a run without a value (it diverged) counted as the worst; None when the
    median itself is such a run (or, two-sided, when any run has no value: there is no 'worst' side)."""
    if all(v is not None for v in values):
        return statistics.median(values)  # type: ignore[type-var]
    if direction == "two-sided":
        return None
    worst = -math.inf if direction == "higher-is-better" else math.inf
    m = statistics.median([worst if v is None else v for v in values])
    return m if math.isfinite(m) else None


def throughput_reference(baseline: Baseline, run_env: Environment | None,
                         run_speed: float | None = None) -> tuple[ThroughputRef | None, str]:
    """The throughput reference recorded on this device model with this thread count, or why none fits. Where
    hosts of one device model ran at speeds of different kinds (:func:`same_speed_kind`: a slow H200 host beside a
    fast one), the baseline holds one reference per kind and the run takes the one whose calibration is nearest
    its own (``run_speed``)."""
    refs = baseline.throughput.references
    if run_env is None:
        return (refs[0] if refs else None), ""
    model, threads = run_env.machine.device_model, run_env.software.threads
    fits = [ref for ref in refs if ref.device_model == model and ref.threads == threads]
    if fits:
        if run_speed and len(fits) > 1:
            return min(fits, key=lambda r: abs(math.log(run_speed / r.speed_index)) if r.speed_index else math.inf), ""
        return fits[0], ""
    have = "; ".join(f"{r.device_model} ({r.threads} threads)" for r in refs) or "none recorded"
    return None, (f"throughput not comparable: {model} ({threads} threads) vs {have} — add this machine's with "
                  "`harness record-baseline … --throughput-only`")


def same_speed_kind(a: float | None, b: float | None) -> bool:
    """Whether two calibrations (speed indices) are of one kind of machine: within :data:`MIN_SPEED_SCALE` of each
    other either way (unknown counts as the same: nothing tells them apart)."""
    return not (a and b) or MIN_SPEED_SCALE <= a / b <= 1 / MIN_SPEED_SCALE


# The model string does not pin a virtual machine's speed (baselines/README.md: "AMD EPYC" measured 9.8k and 7.4k
# tok/s in two sessions), so every run times a small fixed workload (its calibration: the median of the samples at
# its start, every 10 steps and at its end). A calibration slower than the reference's lowers the floor by that
# ratio: a fresh, slower machine of the same model is not a regression. A faster one never raises it (the samples spread under a
# neighbour's load, and a raised floor made the main command false-FAIL in a container), and a code slowdown does
# not touch the calibration, so it still fails. Below MIN_SPEED_SCALE the machine is not the same kind: a notice.
MIN_SPEED_SCALE = 0.7


def speed_scale(ctx: Context, ref: ThroughputRef) -> float | None:
    """Run speed / reference speed (machine calibration), when both were measured with the same torch.

    Another torch could speed the calibration and the engine differently, so it is then not used.
    """
    env, ref_env = ctx.run_env, ctx.baseline.environment
    if not ref.speed_index or not ctx.run_speed or env is None or ref_env is None \
            or env.software.torch != ref_env.software.torch:
        return None
    return ctx.run_speed / ref.speed_index


def throughput_tolerance(pol: ThroughputPolicy, relative_spread: float) -> float:
    """The floor's distance below the reference: the seeds' spread times the policy's factor, within its bounds."""
    return min(pol.max_tolerance, max(pol.min_tolerance, pol.spread_factor * relative_spread))


def quantile_name(q: float) -> str:
    return "median" if q == 0.5 else f"p{q * 100:.0f}"


class Notices(list[str]):
    """The judge's notices, and the whole-run checks it could not make (:class:`Unjudged`, each also a notice)."""

    def __init__(self) -> None:
        super().__init__()
        self.unjudged: list[Unjudged] = []

    def not_judged(self, group: str, metric: str, why: str) -> list[Check]:
        """Record that ``group``'s check of ``metric`` was not made, and why; no checks."""
        self.append(why)
        self.unjudged.append(Unjudged(group=group, metric=metric, reason=why))
        return []


def throughput_check(ctx: Context, notices: Notices) -> list[Check]:
    pol = ctx.baseline.policy.throughput
    ref, why = throughput_reference(ctx.baseline, ctx.run_env, ctx.run_speed)
    if ref is None:
        return notices.not_judged(THROUGHPUT, pol.metric, why)
    speed = steady_speed(ctx.run, pol.metric, pol.warmup_steps, ctx.upto)
    vals = speed.values if speed.judgeable else speed.all_values
    if not vals:
        return notices.not_judged(THROUGHPUT, pol.metric, f"throughput not checked: no steady steps (the first "
                                  f"{pol.warmup_steps} are warm-up)")
    scale = speed_scale(ctx, ref)
    if scale is not None and scale < MIN_SPEED_SCALE:
        return notices.not_judged(
            THROUGHPUT, pol.metric, f"throughput not comparable: this machine ran the speed calibration at "
            f"{scale:.2f}x the reference machine's ({ref.device_model}), not the same kind of machine — add this "
            "machine's with `harness record-baseline … --throughput-only`")
    if scale and scale > 1.4:
        notices.append(f"this machine ran the speed calibration at {scale:.2f}x the reference machine's")
    if scale is not None and ref.per_step is not None and ref.speed_index:
        scaled = per_step_scaled(ctx.run, pol.metric, pol.warmup_steps, ref.speed_index, ctx.upto)
        if scaled is not None:
            return per_step_check(pol, ref, ref.per_step, scaled, notices)
    if speed.left_out and speed.judgeable:
        notices.append(f"throughput over the {len(vals)} steady steps with uncontended CPUs ({speed.why_not()})")
    q = pol.quantile
    med, ref_value = quantile(vals, q), ref.value
    # a slower calibration lowers the floor, a faster one never raises it (see MIN_SPEED_SCALE)
    relax = min(1.0, scale) if scale else 1.0
    base = ref_value * relax
    tol = throughput_tolerance(pol, ref.relative_spread)
    ok = med >= base * (1 - tol)
    if not speed.judgeable:  # measured on a busy machine: above the floor even so is a pass; below says nothing
        if not ok:
            return notices.not_judged(THROUGHPUT, pol.metric,
                                      f"throughput not judged: {speed.why_not()} — re-run on an idle machine")
        notices.append(f"throughput passed although {speed.why_not()}")
    if med > ref_value * pol.refresh_ratio:
        notices.append(f"throughput {med:,.0f} tok/s is {med / ref_value:.2f}x the baseline's {ref_value:,.0f}: "
                       "refresh the baseline (record-baseline --throughput-only --force)")
    calib = (f"; this machine's calibrated speed {scale:.2f}x the reference's"
             + (f", so the reference is taken as {base:,.0f}" if relax < 1.0 else "") if scale else "")
    detail = (f"{quantile_name(q)} {med:,.0f} tok/s over {len(vals)} steady steps vs {ref_value:,.0f} on {ref.device_model}"
              f"{calib} ({(med / base - 1) * 100:+.1f}%; floor -{tol * 100:.0f}%)")
    return [make_check(THROUGHPUT, pol.metric, None, med, base, base * tol, ok, len(vals), [], detail)]


def per_step_check(pol: ThroughputPolicy, ref: ThroughputRef, per: PerStepThroughput, scaled: list[float],
                   notices: Notices) -> list[Check]:
    """The throughput check on the reference machine's speed, step by step: each steady step's tokens/s times the
    reference's calibration over the sample taken just before that step, against the seeds' same quantity. Where
    the seeds showed that the samples follow a launch-bound run's host (``per_step`` recorded), this separates
    the host's moment-to-moment speed from the code's (measured on an H200 host: bench/results/throughput-per-step-h200-2026-12-05/)."""
    value, base = quantile(scaled, pol.quantile), per.value
    tol = throughput_tolerance(pol, per.relative_spread)
    ok = value >= base * (1 - tol)
    if value > base * pol.refresh_ratio:
        notices.append(f"throughput {value:,.0f} tok/s at the reference's machine speed is {value / base:.2f}x the "
                       f"baseline's {base:,.0f}: refresh the baseline (record-baseline --throughput-only --force)")
    detail = (f"{quantile_name(pol.quantile)} {value:,.0f} tok/s over {len(scaled)} steady steps, each scaled to the reference machine's "
              f"speed by the calibration sample taken before it, vs {base:,.0f} on {ref.device_model} "
              f"({(value / base - 1) * 100:+.1f}%; floor -{tol * 100:.0f}%)")
    return [make_check(THROUGHPUT, pol.metric, None, value, base, base * tol, ok, len(scaled), [], detail)]


def memory_check(ctx: Context, notices: Notices) -> list[Check]:
    pol, ref = ctx.baseline.policy.memory, ctx.baseline.memory
    vals = [v for k, v in ctx.run.get(pol.metric, {}).items() if k <= ctx.upto and math.isfinite(v)]
    if not ref.seed_values:
        return notices.not_judged(MEMORY, pol.metric, f"memory not checked: the baseline recorded no {pol.metric} "
                                  "— re-record it to gate peak memory")
    if not vals:
        return notices.not_judged(MEMORY, pol.metric, f"memory not checked: the run reports no finite {pol.metric}")
    peak, base = max(vals), ref.value
    ok = peak <= base * (1 + pol.tolerance)
    detail = f"peak {peak:.3f} GB vs {base:.3f} GB (ceiling +{pol.tolerance * 100:.0f}%)"
    return [make_check(MEMORY, pol.metric, None, peak, base, base * pol.tolerance, ok, len(vals), [], detail)]


def evaluate(ctx: Context, tiers: list[str], *, throughput: bool = True,
             memory_differs: list[str] | None = None) -> tuple[list[Check], Notices]:
    """Every check of ``tiers`` plus throughput (unless a replay) and memory (unless the environment differs
    in ways that move it: ``memory_differs``), and notices (with the whole-run checks not made)."""
    notices = Notices()
    checks = [c for t in tiers for c in TIERS[t](ctx)]
    unrecorded = sorted(n for n in ctx.run if n not in ctx.baseline.metrics and set(metric_tiers(n)) & set(tiers))
    if unrecorded:
        notices.append(f"not gated: the baseline has no values for {len(unrecorded)} metric(s) the run reports "
                       f"({', '.join(unrecorded[:6])}{' …' if len(unrecorded) > 6 else ''}); re-record the baseline "
                       "to gate them")
    if throughput:
        checks += throughput_check(ctx, notices)
    else:
        notices.not_judged(THROUGHPUT, ctx.baseline.policy.throughput.metric, "throughput not checked: a replay run "
                           "does not sample, so its tokens/s are not a rollout's")
    if memory_differs:
        notices.not_judged(MEMORY, ctx.baseline.policy.memory.metric, "memory not comparable: peak memory depends "
                           "on the software and device that ran; differs: " + "; ".join(memory_differs))
    else:
        checks += memory_check(ctx, notices)
    return checks, notices
