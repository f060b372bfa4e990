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
from harness.judge.baseline import load_series
from harness.judge.pages import render
from harness.judge.plots import failed_checks, plot_curves

GROUPS = ("exact", "band", "statistical", "throughput", "memory")


# ----------------------------------------------------------------------------- run report
def _verdict_dict(verdict: Any) -> dict[str, Any]:
    return verdict if isinstance(verdict, dict) else verdict.to_dict()


def _load_baseline_quiet(v: dict[str, Any]) -> dict[str, Any] | None:
    path = (v.get("baseline") or {}).get("path")
    if not path or not Path(path).is_file():
        return None
    try:
        return load_json_strict(path)
    except Exception:  # noqa: BLE001 - the report still renders without the baseline's curves
        return None


def render_run_report(run_dir: Path, verdict: Any, *, series: dict[str, dict[int, float]] | None = None,
                      manifest: Any = None) -> str:
    """The page of a run directory, or (``series`` and ``manifest`` given: another trainer's log, judged in
    memory) of those written into ``run_dir``."""
    run_dir = Path(run_dir)
    v = _verdict_dict(verdict)
    if manifest is None and (run_dir / "manifest.json").is_file():
        try:
            manifest = load_json_strict(run_dir / "manifest.json")
        except Exception as err:  # noqa: BLE001 - shown instead of the manifest
            manifest = {"unreadable": str(err)}
    # a refused comparison shows the run alone: the baseline's band would suggest a comparison that was not made
    baseline = _load_baseline_quiet(v) if v["status"] in ("pass", "fail") else None
    run = load_series(run_dir) if series is None else series
    # the verdict's own throughput check: its reference (scaled to this machine's calibration) and floor
    tp_check = next((c for c in v.get("checks", []) if c.get("group") == "throughput"), None)
    curves = plot_curves(run_dir, run, baseline, (v.get("baseline") or {}).get("steps_compared"), tp_check,
                         failed=failed_checks(v.get("checks")))
    r, b = v["run"], v.get("baseline") or {}
    facts = [("recipe", r.get("recipe")), ("profile : scale", f"{r.get('profile')} : {r.get('scale')}"),
             ("seed", r.get("seed")), ("run status", r.get("status")), ("steps", r.get("steps_completed")),
             ("tier", f"{v.get('tier') or '—'}  ({v.get('tier_reason') or 'n/a'})"),
             ("tiers applied", ", ".join(v.get("tiers_applied") or []) or "—"),
             ("baseline", f"{b.get('path', '—')}  (seeds {b.get('primary_seed', '—')} + "
                          f"{b.get('noise_seeds', [])}, {b.get('steps', '—')} steps)" if b else "none"),
             ("overrides", ", ".join(f"{o['key']}={o['value']}" for o in v.get("overrides") or []) or "none"),
             ("fault injection", json.dumps(v.get("fault_injection")) if v.get("fault_injection") else "none"),
             ("judged", v.get("created_utc"))]
    order = {g: i for i, g in enumerate(GROUPS)}
    checks = sorted(v.get("checks") or [], key=lambda c: (c["passed"], order.get(c["group"], 9), c["metric"]))
    changes = [f"{c['key']}: {c['baseline']} -> {c['run']}" + (" (rules out exact)" if c["blocks_exact"] else "")
               for c in v.get("changes") or []]
    return render("run.html.j2", title=f"{r.get('recipe')} {v['status']}", v=v, run=r, facts=facts,
                  summary_line=v.get("summary_line", ""), reasons=v.get("reasons") or [],
                  notices=v.get("notices") or [],
                  counts=v.get("counts") or {}, changes=changes, curves=curves, checks=checks,
                  crosscheck=v.get("crosscheck") or [],
                  manifest=None if manifest is None else json.dumps(manifest, indent=2))


def write_run_report(run_dir: Path, verdict: Any, **given: Any) -> Path:
    path = Path(run_dir) / "report.html"
    write_text_atomic(path, render_run_report(Path(run_dir), verdict, **given))
    return path


# ----------------------------------------------------------------------------- gate report
def write_gate_report(out_dir: Path, results: list[dict[str, Any]]) -> Path:
    """``results``: one dict per recipe with recipe, status, summary_line, run_dir (may be None), checks."""
    out_dir = Path(out_dir)
    rows = []
    for res in results:
        link = None
        if res.get("run_dir") and (Path(res["run_dir"]) / "report.html").is_file():
            run_dir = Path(res["run_dir"]).resolve()
            rel = run_dir.relative_to(out_dir.resolve()) if run_dir.is_relative_to(out_dir.resolve()) else run_dir
            link = (rel / "report.html").as_posix()
        rows.append({"recipe": res["recipe"], "status": res["status"], "tier": res.get("tier"),
                     "counts": res.get("counts") or {}, "summary_line": res.get("summary_line", ""), "link": link})
    page = render("gate.html.j2", title="gate", results=rows, groups=GROUPS,
                  passed=sum(r["status"] == "pass" for r in results))
    path = out_dir / "report.html"
    write_text_atomic(path, page)
    return path
