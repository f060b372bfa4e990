"""The curves of a run's report (``curves-<stem>.png``): the run against its baseline, drawn to be read at a glance.

Two steps. :func:`curve_data` computes what each figure shows (pure: lists of numbers, no matplotlib), and
:func:`draw` turns one :class:`Curve` into a matplotlib figure; :func:`plot_curves` writes them. Per metric:

- the run: bold, solid;
- the baseline's primary seed: dashed, a darker shade of the run's colour with a white edge, drawn above the run, so
  a run that repeats its baseline bit for bit still shows both lines;
- the band the ``band`` tier allows (``ref ± max(atol, rtol*|ref|, k*noise)``), clipped to the metric's range
  (:data:`RANGES`): shaded for the first metric of a figure, hatched for the next, each named in the legend;
- the baseline's noise seeds: thin, light;
- the steps where a check of the verdict failed: red marks on the run's curve, one shape per check group, the group
  with the fewest failing steps largest and on top; a red span at a failed step the run has no value for; and a red
  frame around a figure with a metric whose failed check has no step (throughput: the run's steady speed).
"""

from __future__ import annotations

import fnmatch
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.jsonio import write_bytes_atomic
from harness.judge.tiers import BAND, band_tolerance
from harness.records.baseline import Baseline
from harness.records.verdict import Check

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Points = list[tuple[int, float]]
Failed = dict[str, list[tuple[int | None, str]]]  # metric -> (failing step or None for the whole run, check group)

CURVES = [  # (file stem, title, metrics: first is the main one)
    ("reward", "Reward (train score / validation)", ["critic/score/mean", "val-core/*"]),
    ("loss", "Policy loss", ["actor/pg_loss"]),
    ("kl", "KL to reference", ["actor/kl_loss"]),
    ("entropy", "Entropy", ["actor/entropy"]),
    ("grad-norm", "Gradient norm", ["actor/grad_norm"]),
    ("throughput", "Throughput (tokens/s)", ["perf/throughput"]),
]
COLOURS = ["#1f4e9c", "#2b8a3e", "#6a4c93", "#8f5b00"]  # per metric of a figure; red is kept for failures
FAILED_COLOUR = "#d00000"
FAILED_MARKERS = ["X", "D", "s", "^", "v", "P"]  # per failed check group of a figure
BAND_HATCHES = [None, "////", "\\\\\\\\", "...."]  # per metric of a figure: shaded, then hatched

# The range each metric can take (first matching pattern wins; None: unbounded on that side). Every registered
# reward (harness/core/reward.py) scores in [0, 1]: geo3k 0.9*accuracy + 0.1*format, format_only, exact_boxed; a
# reward registered with another range needs its own line here (tests/unit/test_plots.py checks the registry).
# critic/rewards/* is left out: with a KL penalty in the reward it leaves [0, 1]. A band is clipped to the range
# widened to the values the run and the baseline actually took, so clipping never hides a recorded value (k1's KL
# estimate, for one, can go below 0).
RANGES: list[tuple[str, float | None, float | None]] = [
    ("critic/score/*", 0.0, 1.0),
    ("val-core/*/reward/mean", 0.0, 1.0),
    ("reward/acc/*", 0.0, 1.0),
    ("reward/format/*", 0.0, 1.0),
    ("actor/pg_clipfrac*", 0.0, 1.0),
    ("response_length/clip_ratio", 0.0, 1.0),
    ("actor/entropy", 0.0, None),
    ("actor/grad_norm", 0.0, None),
    ("actor/kl_loss", 0.0, None),
    ("actor/lr", 0.0, None),
    ("response_length/*", 0.0, None),
    ("prompt_length/*", 0.0, None),
    ("perf/throughput", 0.0, None),
    ("perf/*memory*", 0.0, None),
    ("timing_s/*", 0.0, None),
]


def metric_range(name: str) -> tuple[float | None, float | None]:
    """The range of ``name`` by :data:`RANGES`; ``(None, None)`` for a metric without one."""
    for pattern, lo, hi in RANGES:
        if fnmatch.fnmatchcase(name, pattern):
            return lo, hi
    return None, None


def label(name: str) -> str:
    """A metric's name as the legend gives it."""
    if name == "critic/score/mean":
        return "train score"
    if name.startswith("val-core/"):
        return "val " + name.removeprefix("val-core/").removesuffix("/reward/mean")
    return name


def failed_checks(checks: list[Check]) -> Failed:
    """metric -> (step, group) of every check that did not pass: its failing steps, else its step, else ``None``
    (the check failed as a whole, e.g. throughput)."""
    out: Failed = {}
    for c in checks:
        if not c.passed:
            steps: list[int | None] = list(c.failing_steps) or [c.step]
            out.setdefault(c.metric, []).extend((k, c.group) for k in steps)
    return out


# ----------------------------------------------------------------------------- what each figure shows
@dataclass
class Band:
    steps: list[int]
    lo: list[float]
    hi: list[float]


@dataclass
class Series:
    """One metric of a figure."""

    metric: str
    label: str
    colour: str
    hatch: str | None
    run: Points = field(default_factory=list)
    ref: Points = field(default_factory=list)  # the baseline's primary seed
    noise: list[Points] = field(default_factory=list)  # the baseline's noise seeds
    band: Band | None = None  # clipped to the metric's range
    failed: list[tuple[int, float | None, str]] = field(default_factory=list)  # (step, run value there, group)
    failed_whole: list[str] = field(default_factory=list)  # groups of failed checks without a step


@dataclass
class Line:
    """A horizontal reference line (throughput's baseline level and floor)."""

    y: float
    label: str
    colour: str
    style: str


@dataclass
class Curve:
    stem: str
    title: str
    series: list[Series]
    lines: list[Line] = field(default_factory=list)
    span: tuple[float, float, str] | None = None  # a shaded step range with its legend label (throughput warm-up)
    ylim: tuple[float, float] | None = None
    primary_seed: Any = None

    @property
    def fname(self) -> str:
        return f"curves-{self.stem}.png"


def _expand(pattern: str, names: list[str]) -> list[str]:
    if pattern.endswith("*"):
        return sorted(n for n in names if n.startswith(pattern[:-1]))
    return [pattern] if pattern in names else []


def _finite(points: list[tuple[int, float | None]]) -> Points:
    return [(k, v) for k, v in points if v is not None and math.isfinite(v)]


def _series(i: int, name: str, run: dict[str, dict[int, float]], baseline: Baseline | None,
            upto: int | None, failed: Failed) -> Series:
    s = Series(name, label(name), COLOURS[i % len(COLOURS)], BAND_HATCHES[i % len(BAND_HATCHES)])
    values = run.get(name, {})
    s.run = _finite(sorted(values.items()))
    spec = baseline.metrics.get(name) if baseline else None
    if baseline and spec:
        keep = [j for j, k in enumerate(spec.steps) if upto is None or k <= upto]
        s.ref = _finite([(spec.steps[j], spec.values[j]) for j in keep])
        s.noise = [p for row in spec.noise_values if (p := _finite([(spec.steps[j], row[j]) for j in keep]))]
        if BAND.name in spec.tiers and keep:
            seen = [v for pts in (s.run, s.ref, *s.noise) for _, v in pts]
            lo, hi = metric_range(name)
            lo = None if lo is None else min([lo, *seen])
            hi = None if hi is None else max([hi, *seen])
            tol_at = band_tolerance(spec, baseline.policy.band, spec.noise_std)
            ks, lows, highs = [], [], []
            for j in keep:
                ref = spec.values[j]
                if ref is None or not math.isfinite(ref):
                    continue
                tol = tol_at(j, ref)
                ks.append(spec.steps[j])
                lows.append(ref - tol if lo is None else max(ref - tol, lo))
                highs.append(ref + tol if hi is None else min(ref + tol, hi))
            s.band = Band(ks, lows, highs) if ks else None
    for step, group in failed.get(name, []):
        if step is None:
            s.failed_whole.append(group)
        else:
            s.failed.append((step, values.get(step), group))
    return s


def _ylim(curve: Curve) -> tuple[float, float] | None:
    """From what is drawn: the values, the clipped bands and the reference lines, with a 5 % margin."""
    ys = [v for s in curve.series for pts in (s.run, s.ref, *s.noise) for _, v in pts]
    ys += [v for s in curve.series if s.band for v in (*s.band.lo, *s.band.hi)]
    ys += [line.y for line in curve.lines]
    ys = [y for y in ys if math.isfinite(y)]
    if not ys:
        return None
    lo, hi = min(ys), max(ys)
    pad = 0.05 * (hi - lo) or 0.05 * abs(hi) or 0.05
    return lo - pad, hi + pad


def curve_data(run: dict[str, dict[int, float]], baseline: Baseline | None, upto: int | None = None,
               throughput: Check | None = None, failed: Failed | None = None) -> list[Curve]:
    """What each figure of :data:`CURVES` shows; a figure without any of its metrics is left out (``throughput``:
    the verdict's throughput check, whose reference and floor are drawn)."""
    base_metrics = baseline.metrics if baseline else {}
    names = sorted(set(run) | set(base_metrics))
    out = []
    for stem, title, patterns in CURVES:
        metrics = [m for p in patterns for m in _expand(p, names)]
        if not metrics:
            continue
        curve = Curve(stem, title, [_series(i, m, run, baseline, upto, failed or {}) for i, m in enumerate(metrics)],
                      primary_seed=baseline.primary_seed if baseline else None)
        if stem == "throughput" and baseline and throughput and throughput.ref_value is not None:
            pol, level = baseline.policy.throughput, throughput.ref_value
            drop = throughput.tolerance or 0.0
            q = pol.quantile
            curve.lines = [Line(level, f"baseline {'median' if q == 0.5 else f'p{q * 100:.0f}'} {level:,.0f}",
                                "#222222", "--"),
                           Line(level - drop, f"floor -{drop / level * 100:.0f}%" if level else "floor",
                                FAILED_COLOUR, ":")]
            curve.span = (0.5, pol.warmup_steps + 0.5, "warm-up (skipped)")
        curve.ylim = _ylim(curve)
        out.append(curve)
    return out


# ----------------------------------------------------------------------------- drawing
def _shade(colour: str, factor: float) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(colour)
    return r * factor, g * factor, b * factor


def _runs_of(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive steps merged: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for k in sorted(set(steps)):
        if out and k == out[-1][1] + 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def _failed_groups(curve: Curve) -> dict[str, int]:
    """The check groups that failed in a figure -> their failing steps, fewest first: a group that fails at every
    step (exact, once anything differs) would otherwise cover the few steps where a looser one failed."""
    count: dict[str, int] = {}
    for s in curve.series:
        for _, _, g in s.failed:
            count[g] = count.get(g, 0) + 1
        for g in s.failed_whole:
            count.setdefault(g, 0)
    return dict(sorted(count.items(), key=lambda item: item[1]))  # stable: ties keep their first appearance


def draw(curve: Curve) -> Figure:
    """One figure (no pyplot: nothing global changes); artists carry a gid: ``run:``, ``baseline:``, ``band:``,
    ``noise:`` + metric, and ``failed:<metric>:<group>``."""
    from matplotlib import patheffects
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6.4, 4.4), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    columns: list[list[Any]] = []  # legend: one column per metric (run, baseline, band), then one of the rest
    few = max((len(s.run) for s in curve.series), default=0) < 12
    halo = [patheffects.withStroke(linewidth=2.4, foreground="white")]  # narrower than the run: both stay visible
    groups = _failed_groups(curve)
    for s in curve.series:
        column: list[Any] = []
        if s.run:
            (line,) = ax.plot(*zip(*s.run), color=s.colour, lw=3.0, zorder=3, label=f"{s.label} (run)",
                              marker="o" if few else None, ms=5.5)
            line.set_gid(f"run:{s.metric}")
            column.append(line)
        elif s.ref:
            column.append(Line2D([], [], color=s.colour, lw=3.0, label=f"{s.label} (not in run)"))
        if s.ref:
            seed = f" seed {curve.primary_seed}" if curve.primary_seed is not None else ""
            (ref,) = ax.plot(*zip(*s.ref), color=_shade(s.colour, 0.5), lw=1.2, ls=(0, (3, 2)), zorder=4,
                             marker="o" if len(s.ref) < 12 else None, ms=3.5, mfc="white", path_effects=halo,
                             label=f"{s.label} (baseline{seed})")
            ref.set_gid(f"baseline:{s.metric}")
            column.append(ref)
        if s.band:
            rgb = _shade(s.colour, 1.0)
            band = ax.fill_between(s.band.steps, s.band.lo, s.band.hi, facecolor=(*rgb, 0.0 if s.hatch else 0.16),
                                   hatch=s.hatch, edgecolor=(*rgb, 0.4 if s.hatch else 0.0), lw=0.0, zorder=0.5,
                                   label=f"band: {s.label} (ref ± tol)")
            band.set_gid(f"band:{s.metric}")
            if s.hatch:  # a hatched band's edges, so its extent reads without the shading
                for edge in (s.band.lo, s.band.hi):
                    ax.plot(s.band.steps, edge, color=rgb, lw=0.6, alpha=0.6, zorder=0.6)
            column.append(band)
        for pts in s.noise:
            (noise,) = ax.plot(*zip(*pts), color=s.colour, lw=0.5, alpha=0.25, zorder=1)
            noise.set_gid(f"noise:{s.metric}")
        for i, group in enumerate(groups):
            pts = [(k, v) for k, v, g in s.failed if g == group and v is not None and math.isfinite(v)]
            if pts:  # nested sizes, the rarest group largest and on top: marks of several groups at a step stay
                # visible; marks at most of the run's steps are drawn small, so its curve still shows between them
                dense = len(pts) > max(12, len(s.run) / 2)
                size = max(5.5 - 1.5 * i, 3) if dense else max(10 - 2.5 * i, 4)
                (marks,) = ax.plot(*zip(*pts), ls="none", marker=FAILED_MARKERS[i % len(FAILED_MARKERS)],
                                   ms=size, color=FAILED_COLOUR, mec="white", mew=0.6, zorder=9 - i)
                marks.set_gid(f"failed:{s.metric}:{group}")
        columns.append(column)
    # a failed step without a run value to mark (the run stopped early, a value was not finite): a red span
    unmarked = [k for s in curve.series for k, v, _ in s.failed if v is None or not math.isfinite(v)]
    for first, last in _runs_of(unmarked):
        ax.axvspan(first - 0.5, last + 0.5, color=FAILED_COLOUR, alpha=0.12, lw=0, zorder=0.2).set_gid("failed:span")
    rest: list[Any] = []
    for ln in curve.lines:
        rest.append(ax.axhline(ln.y, color=ln.colour, lw=1.2, ls=ln.style, zorder=2, label=ln.label))
    if curve.span:
        start, end, text = curve.span
        rest.append(ax.axvspan(start, end, color="#888888", alpha=0.1, lw=0, label=text))
    if any(s.noise for s in curve.series):
        rest.append(Line2D([], [], color="#444444", lw=0.6, alpha=0.6, label="baseline noise seeds"))
    whole = {g for s in curve.series for g in s.failed_whole}
    for i, (group, n) in enumerate(groups.items()):
        what = f"failed check ({group}): " + (f"{n} step{'s' if n != 1 else ''}" if n else "the run as a whole")
        rest.append(Line2D([], [], ls="none", marker=FAILED_MARKERS[i % len(FAILED_MARKERS)], ms=7,
                           color=FAILED_COLOUR, label=what))
    if whole:
        for spine in ax.spines.values():
            spine.set(color=FAILED_COLOUR, lw=2.0)
    if curve.ylim:
        ax.set_ylim(*curve.ylim)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(curve.title, fontsize=11)
    ax.set_xlabel("step", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.25)
    columns = [c for c in (*columns, rest) if c]
    if columns:
        rows = max(len(c) for c in columns)  # legends fill column by column: pad each column to the same height
        blank = Line2D([], [], alpha=0.0, label=" ")
        handles = [h for c in columns for h in (*c, *[blank] * (rows - len(c)))]
        fig.legend(handles=handles, labels=[h.get_label() for h in handles], fontsize=7, loc="outside lower center",
                   ncol=len(columns), frameon=False, handlelength=2.2, columnspacing=1.0)
    return fig


def plot_curves(out_dir: Path, run: dict[str, dict[int, float]], baseline: Baseline | None,
                upto: int | None = None, throughput: Check | None = None, *,
                failed: Failed | None = None) -> list[tuple[str, str]]:
    """Write ``curves-<stem>.png`` files; returns (file name, title) for those written.

    ``failed``: metric -> (step, group) of the verdict's failed checks (:func:`failed_checks`), marked on the curves.
    """
    written = []
    for curve in curve_data(run, baseline, upto, throughput, failed):
        png = io.BytesIO()
        draw(curve).savefig(png, format="png")
        write_bytes_atomic(Path(out_dir) / curve.fname, png.getvalue())
        written.append((curve.fname, curve.title))
    return written
