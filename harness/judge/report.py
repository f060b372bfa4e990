"""``report.html`` for a run (and for a gate): curves against the baseline band, the verdict, the manifest.

Written next to the run's files and self-contained: inline CSS, no scripts, PNG curves
(matplotlib, Agg backend) referenced by relative path, so the directory can be zipped, uploaded as
a CI artefact or opened from disk. Each curve shows the run (bold), the baseline's primary seed
(dashed), the band the ``band`` tier allows (``ref ± max(atol, rtol*|ref|, k*noise)``, shaded) and
the baseline's noise seeds (thin lines).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from harness.jsonio import load_json_strict, write_bytes_atomic, write_text_atomic
from harness.judge.baseline import load_baseline, load_series
from harness.judge.pages import render
from harness.judge.tiers import BAND, GROUPS, THROUGHPUT
from harness.records.base import dump
from harness.records.baseline import Baseline
from harness.records.gate import Gate
from harness.records.verdict import Verdict

CURVES = [  # (file stem, title, metrics: first is the main one)
    ("reward", "Reward (train score / validation)", ["critic/score/mean", "val-core/*"]),
    ("loss", "Policy loss", ["actor/pg_loss"]),
    ("kl", "KL to reference", ["actor/kl_loss"]),
    ("entropy", "Entropy", ["actor/entropy"]),
    ("grad-norm", "Gradient norm", ["actor/grad_norm"]),
    ("throughput", "Throughput (tokens/s)", ["perf/throughput"]),
]
COLOURS = ["#1f4e9c", "#2a9d8f", "#e76f51", "#6a4c93"]

# ----------------------------------------------------------------------------- curves
def _expand(pattern: str, names: list[str]) -> list[str]:
    if pattern.endswith("*"):
        return sorted(n for n in names if n.startswith(pattern[:-1]))
    return [pattern] if pattern in names else []


def _band(spec: dict[str, Any], policy: dict[str, Any]) -> list[float]:
    pol = policy[BAND.name]
    stds, w = spec["noise_std"], pol["noise_window"]
    out = []
    for i, v in enumerate(spec["values"]):
        noise = max(stds[max(0, i - w): i + w + 1], default=0.0)
        out.append(max(spec.get("atol", pol["atol"]), spec.get("rtol", pol["rtol"]) * abs(v), pol["k_noise"] * noise))
    return out


def plot_curves(out_dir: Path, run: dict[str, dict[int, float]], baseline: dict[str, Any] | None,
                upto: int | None = None, throughput: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Write ``curves-<stem>.png`` files; returns (file name, title) for those written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    base_metrics = (baseline or {}).get("metrics", {})
    names = sorted(set(run) | set(base_metrics))
    written = []
    for stem, title, patterns in CURVES:
        metrics = [m for p in patterns for m in _expand(p, names)]
        if not metrics:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
        for i, name in enumerate(metrics):
            colour = COLOURS[i % len(COLOURS)]
            label = name.replace("val-core/", "val ").replace("/reward/mean", "")
            spec = base_metrics.get(name)
            if spec:
                keep = [i for i, k in enumerate(spec["steps"]) if upto is None or k <= upto]
                ks = [spec["steps"][i] for i in keep]
                for row in spec["noise_values"]:
                    pts = [(spec["steps"][i], row[i]) for i in keep if row[i] is not None]
                    if pts:
                        ax.plot(*zip(*pts), color=colour, lw=0.6, alpha=0.45)
                ref = [spec["values"][i] for i in keep]
                if baseline and BAND.name in spec["tiers"]:
                    tol = _band(spec, baseline["policy"])
                    ax.fill_between(ks, [ref[j] - tol[i] for j, i in enumerate(keep)],
                                    [ref[j] + tol[i] for j, i in enumerate(keep)], color=colour, alpha=0.13, lw=0)
                ax.plot(ks, ref, color=colour, lw=1.2, ls="--", alpha=0.9, marker="o" if len(ks) < 8 else None, ms=3)
            series = run.get(name, {})
            if series:
                ks = sorted(series)
                ax.plot(ks, [series[k] for k in ks], color=colour, lw=2.0, label=f"{label} (run)",
                        marker="o" if len(ks) < 8 else None, ms=4)
            elif spec:
                ax.plot([], [], color=colour, lw=2.0, label=f"{label} (not in run)")
        if stem == "throughput" and baseline and throughput and throughput["ref_value"] is not None:
            pol, level, drop = baseline["policy"]["throughput"], throughput["ref_value"], throughput["tolerance"] or 0.0
            q = pol.get("quantile", 0.5)
            ax.axhline(level, color="#444", lw=1.2, ls="--",
                       label=f"baseline {'median' if q == 0.5 else f'p{q * 100:.0f}'} {level:,.0f}")
            ax.axhline(level - drop, color="#c92a2a", lw=1.0, ls=":", label=f"floor -{drop / level * 100:.0f}%")
            ax.axvspan(0.5, pol["warmup_steps"] + 0.5, color="#888", alpha=0.1, lw=0, label="warm-up (skipped)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("step", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.25)
        handles, labels = ax.get_legend_handles_labels()
        if any(m in base_metrics for m in metrics):
            from matplotlib.lines import Line2D
            from matplotlib.patches import Patch

            handles += [Line2D([], [], color="#444", ls="--", lw=1.2), Patch(color="#444", alpha=0.15),
                        Line2D([], [], color="#444", lw=0.6, alpha=0.6)]
            labels += ["baseline (primary seed)", BAND.name, "noise seeds"]
        ax.legend(handles, labels, fontsize=7, loc="best", framealpha=0.8)
        fig.tight_layout()
        fname = f"curves-{stem}.png"
        png = io.BytesIO()
        fig.savefig(png, format="png")
        write_bytes_atomic(out_dir / fname, png.getvalue())
        plt.close(fig)
        written.append((fname, title))
    return written


# ----------------------------------------------------------------------------- run report
def _load_baseline_quiet(v: Verdict) -> Baseline | None:
    path = v.baseline.path if v.baseline else None
    if not path or not Path(path).is_file():
        return None
    try:
        return load_baseline(Path(path))
    except Exception:  # noqa: BLE001 - the report still renders without the baseline's curves
        return None


def render_run_report(run_dir: Path, v: Verdict, *, series: dict[str, dict[int, float]] | None = None,
                      manifest: Any = None) -> str:
    """The page of a run directory, or (``series`` and ``manifest`` given: another trainer's log, judged in
    memory) of those written into ``run_dir``."""
    run_dir = Path(run_dir)
    if manifest is None and (run_dir / "manifest.json").is_file():
        try:
            manifest = load_json_strict(run_dir / "manifest.json")
        except Exception as err:  # noqa: BLE001 - shown instead of the manifest
            manifest = {"unreadable": str(err)}
    # a refused comparison shows the run alone: the baseline's band would suggest a comparison that was not made
    baseline = _load_baseline_quiet(v) if v.status in ("pass", "fail") else None
    run = load_series(run_dir) if series is None else series
    # the verdict's own throughput check: its reference (scaled to this machine's calibration) and floor
    tp_check = next((c for c in v.checks if c.group == THROUGHPUT), None)
    curves = plot_curves(run_dir, run, dump(baseline) if baseline else None,
                         v.baseline.steps_compared if v.baseline else None,
                         dump(tp_check) if tp_check else None)
    r, b = v.run, v.baseline
    facts = [("recipe", r.recipe), ("profile : scale", f"{r.profile} : {r.scale}"),
             ("seed", r.seed), ("run status", r.status), ("steps", r.steps_completed),
             ("tier", f"{v.tier or '—'}  ({v.tier_reason or 'n/a'})"),
             ("tiers applied", ", ".join(v.tiers_applied) or "—"),
             ("baseline", f"{b.path}  (seeds {b.primary_seed} + {b.noise_seeds}, {b.steps} steps)" if b else "none"),
             ("overrides", ", ".join(f"{o.key}={o.value}" for o in v.overrides) or "none"),
             ("fault injection", json.dumps(dump(v.fault_injection)) if v.fault_injection else "none"),
             ("judged", v.created_utc)]
    order = {g: i for i, g in enumerate(GROUPS)}
    checks = sorted(v.checks, key=lambda c: (c.passed, order.get(c.group, len(order)), c.metric))
    changes = [f"{c.key}: {c.baseline} -> {c.run}" + (" (rules out exact)" if c.blocks_exact else "")
               for c in v.changes]
    return render("run.html.j2", title=f"{r.recipe} {v.status}", v=v, run=r, facts=facts,
                  summary_line=v.summary_line, reasons=v.reasons, notices=v.notices,
                  counts=v.counts, changes=changes, curves=curves, checks=checks,
                  crosscheck=v.crosscheck or [],
                  manifest=None if manifest is None else json.dumps(manifest, indent=2))


def write_run_report(run_dir: Path, verdict: Verdict, **given: Any) -> Path:
    path = Path(run_dir) / "report.html"
    write_text_atomic(path, render_run_report(Path(run_dir), verdict, **given))
    return path


# ----------------------------------------------------------------------------- gate report
def write_gate_report(out_dir: Path, gate: Gate) -> Path:
    """``out_dir/report.html``: one row per recipe, its check groups' counts, a link to its run's page."""
    out_dir = Path(out_dir)
    rows, counted = [], []
    for e in gate.entries:
        link = None
        if e.run_dir and (Path(e.run_dir) / "report.html").is_file():
            run_dir = Path(e.run_dir).resolve()
            rel = run_dir.relative_to(out_dir.resolve()) if run_dir.is_relative_to(out_dir.resolve()) else run_dir
            link = (rel / "report.html").as_posix()
        per = {g: {"checks": n, "failed": bad} for g, (n, bad) in e.counts().items()}
        counted.append(per)
        rows.append({"recipe": e.recipe, "status": e.status, "tier": e.verdict.tier if e.verdict else None,
                     "counts": per, "summary_line": e.summary_line, "link": link})
    groups = [g for g in GROUPS if any(g in per for per in counted)]
    page = render("gate.html.j2", title="gate", results=rows, groups=groups,
                  passed=sum(e.status == "pass" for e in gate.entries))
    path = out_dir / "report.html"
    write_text_atomic(path, page)
    return path
