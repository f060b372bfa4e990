"""``report.html`` for a run (and for a gate): curves against the baseline band, the verdict, the manifest.

Written next to the run's files and self-contained: inline CSS, no scripts, PNG curves
(matplotlib, Agg backend) referenced by relative path, so the directory can be zipped, uploaded as
a CI artefact or opened from disk. Each curve shows the run (bold), the baseline's primary seed
(dashed), the band the ``band`` tier allows (``ref ± max(atol, rtol*|ref|, k*noise)``, shaded) and
the baseline's noise seeds (thin lines).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.jsonio import load_json_strict, write_text_atomic
from harness.judge.baseline import load_baseline, load_series
from harness.judge.pages import render
from harness.judge.plots import failed_checks, plot_curves
from harness.judge.tiers import GROUPS, THROUGHPUT
from harness.records.base import dump
from harness.records.baseline import Baseline
from harness.records.gate import Gate
from harness.records.verdict import Verdict


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
    curves = plot_curves(run_dir, run, baseline, v.baseline.steps_compared if v.baseline else None, tp_check,
                         failed=failed_checks(v.checks))
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
