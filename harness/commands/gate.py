"""``harness gate``: every recipe at smoke scale on the live profile, judged against its baseline.

Each recipe runs in its own process (``harness run``: a fresh process so that peak memory and
throughput are its own) into ``<out>/<recipe>/``; the verdicts are collected into a JUnit XML file
(one testcase per recipe x check group), a Markdown table (also appended to
``$GITHUB_STEP_SUMMARY`` when set) and ``<out>/report.html``. Exit 1 on any regression, refusal,
failed run or missing baseline; 0 when every recipe passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness.commands import chosen_profile, steps_count
from harness.errors import EXIT_FINDINGS, EXIT_OK, HarnessError
from harness.jsonio import load_json_strict, write_bytes_atomic, write_json_atomic, write_text_atomic

HELP = "Run every recipe at smoke scale and judge it; JUnit XML + Markdown summary; non-zero on any regression."
GROUPS = ("exact", "band", "statistical", "throughput", "memory", "ckpt-resume")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", help="hardware profile (default: the one matching this machine)")
    p.add_argument("--recipes", help="comma-separated recipe names (default: every recipe supporting the profile)")
    p.add_argument("--scale", default="smoke", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=steps_count(), help="GRPO steps per recipe (default: the recipe's; fewer compares a prefix)")
    p.add_argument("--out", type=Path, default=Path("runs/gate"), help="output directory (default: runs/gate)")
    p.add_argument("--baselines", type=Path, help="baselines directory (default: baselines/)")
    p.add_argument("--runtime", default="local", choices=("auto", "local", "docker", "torchrun"),
                   help="where each recipe runs (default: local)")
    p.add_argument("--ckpt-resume-steps", type=steps_count(0), default=6, metavar="N",
                   help="per recipe, also run N steps straight vs N/2 + resume N/2 and compare bitwise "
                        "(default 6; 0 = skip)")
    p.add_argument("--junit", type=Path, help="write JUnit XML here")
    p.add_argument("--summary", type=Path, help="write the Markdown summary here")


def _recipes(args: argparse.Namespace, profile: str) -> list[str]:
    from harness.config.recipe import load_recipe_file, recipe_names, recipe_path

    if args.recipes:
        known = recipe_names()
        names = [r.strip() for r in args.recipes.split(",") if r.strip()]
        for name in names:  # names only: each becomes <out>/<name>/ and baselines/<name>/
            if name not in known:
                raise HarnessError(f"no such recipe {name!r}", key_path="--recipes",
                                   fix=f"give recipe names from recipes/, comma-separated: {', '.join(known)}")
        return names
    out = []
    for name in recipe_names():
        rec = load_recipe_file(recipe_path(name))
        if args.scale in rec["profiles"].get(profile, {}):
            out.append(name)
    return out


def run_one(recipe: str, profile: str, args: argparse.Namespace) -> dict[str, Any]:
    from harness.judge.baseline import default_path

    run_dir = args.out / recipe
    bpath = default_path(recipe, profile, args.scale, args.baselines)
    if not bpath.is_file():  # nothing to judge against: fail fast instead of training first
        line = (f"NO-BASELINE {recipe} {profile}:{args.scale} no baseline at {bpath}; record one with `harness "
                f"record-baseline {recipe} --profile {profile} --scale {args.scale} --seeds 3`")
        print(line, flush=True)
        return {"recipe": recipe, "status": "no-baseline", "summary_line": line, "run_dir": None, "tier": None,
                "counts": {}, "reasons": [line.split(" ", 3)[3]], "notices": [], "checks": []}
    if (run_dir / "manifest.json").exists():
        import shutil

        shutil.rmtree(run_dir)  # the gate owns <out>/<recipe>/: a previous gate's run is replaced
    from harness.run.runtime.child import harness_run
    from harness.run.runtime.spec import RunSpec

    cmd = RunSpec(recipe, profile, args.scale, out=str(run_dir), steps=args.steps, runtime=args.runtime, quiet=True,
                  baseline=str(bpath)).run_args()
    print(f"gate: {recipe} ...", file=sys.stderr, flush=True)
    proc = harness_run(cmd, capture_output=True)
    vpath = run_dir / "verdict.json"
    if vpath.is_file():
        v = load_json_strict(vpath)
        out = {"recipe": recipe, "status": v["status"], "summary_line": v["summary_line"], "run_dir": str(run_dir),
               "tier": v["tier"], "counts": v["counts"], "reasons": v["reasons"], "notices": v["notices"],
               "checks": [c for c in v["checks"] if not c["passed"]]}
    else:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        out = {"recipe": recipe, "status": "error", "summary_line": f"ERROR {recipe}: run exited {proc.returncode}: "
               f"{tail}", "run_dir": str(run_dir) if run_dir.exists() else None, "tier": None, "counts": {},
               "reasons": [tail], "notices": [], "checks": []}
    print(out["summary_line"], flush=True)
    return out


def ckpt_resume(result: dict[str, Any], recipe: str, profile: str, args: argparse.Namespace) -> None:
    """Add the checkpoint-resume check (N straight vs N/2 + resume N/2, bitwise) to ``result``."""
    from harness.config.recipe import resolve
    from harness.run.resume_check import ckpt_resume_check

    print(f"gate: {recipe} ckpt-resume ...", file=sys.stderr, flush=True)
    try:
        check = ckpt_resume_check(resolve(recipe, profile, args.scale), args.out / f"{recipe}-ckpt-resume",
                                  args.ckpt_resume_steps)
        ok, detail = bool(check["pass"]), f"first mismatch: {check['first_mismatch']}"
    except HarnessError as err:
        ok, detail = False, err.one_line()
    result["counts"]["ckpt-resume"] = {"checks": 1, "failed": 0 if ok else 1}
    if not ok:
        result["checks"].append({"group": "ckpt-resume", "metric": "metrics.jsonl", "detail": detail, "passed": False})
        result["reasons"].append(f"ckpt-resume: {detail}")
        if result["status"] == "pass":
            result["status"] = "fail"


def junit(results: list[dict[str, Any]], profile: str) -> ET.ElementTree:
    suite = ET.Element("testsuite", name=f"harness-gate-{profile}")
    n = fails = 0
    for r in results:
        cases: list[tuple[str, list[str]]] = []
        if r["status"] in ("pass", "fail"):
            for g in GROUPS:
                if g in r["counts"]:
                    bad = [c for c in r["checks"] if c["group"] == g]
                    cases.append((g, [f"{c['metric']}: {c['detail']}" for c in bad]))
        else:
            cases.append(("baseline" if r["status"] in ("refused", "no-baseline") else "run",
                          r["reasons"] or r["notices"] or [r["summary_line"]]))
        for group, problems in cases:
            n += 1
            tc = ET.SubElement(suite, "testcase", classname=f"gate.{profile}.{r['recipe']}", name=group)
            if problems:
                fails += 1
                f = ET.SubElement(tc, "failure", message=problems[0][:500], type=r["status"])
                f.text = "\n".join(problems)
            ET.SubElement(tc, "system-out").text = r["summary_line"]
    suite.set("tests", str(n))
    suite.set("failures", str(fails))
    suite.set("errors", "0")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def markdown(results: list[dict[str, Any]], profile: str) -> str:
    ok = all(r["status"] == "pass" for r in results)
    lines = [f"### Gate ({profile}, smoke): {'✅ pass' if ok else '❌ FAIL'}", "",
             "| recipe | status | tier | " + " | ".join(GROUPS) + " |", "|---" * (3 + len(GROUPS)) + "|"]
    for r in results:
        cells = []
        for g in GROUPS:
            c = r["counts"].get(g)
            cells.append("—" if not c else f"{'✅' if not c['failed'] else '❌'} {c['checks'] - c['failed']}/"
                         f"{c['checks']}")
        icon = {"pass": "✅", "fail": "❌"}.get(r["status"], "⚠️")
        lines.append(f"| {r['recipe']} | {icon} {r['status']} | {r['tier'] or '—'} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- `{r['summary_line']}`" for r in results]
    for r in results:
        for reason in r["reasons"] if r["status"] != "pass" else []:
            lines.append(f"  - {r['recipe']}: {reason}")
    return "\n".join(lines) + "\n"


def execute(args: argparse.Namespace) -> int:
    from harness.judge.report import write_gate_report

    profile = chosen_profile(args)
    recipes = _recipes(args, profile)  # bad names are refused before anything is written
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run_one(r, profile, args) for r in recipes]
    if args.ckpt_resume_steps:
        for r in results:
            if r["status"] in ("pass", "fail"):
                ckpt_resume(r, r["recipe"], profile, args)
    write_json_atomic(args.out / "gate.json", {"profile": profile, "results": results})
    md = markdown(results, profile)
    if args.summary:
        write_text_atomic(args.summary, md)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(md)
    if args.junit:
        root = junit(results, profile).getroot()
        assert root is not None
        write_bytes_atomic(args.junit, ET.tostring(root, encoding="utf-8", xml_declaration=True))
    write_gate_report(args.out, results)
    sys.stdout.write(md)
    ok = bool(results) and all(r["status"] == "pass" for r in results)
    return EXIT_OK if ok else EXIT_FINDINGS
