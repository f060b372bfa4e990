"""``harness gate``: every recipe at smoke scale on the live profile, judged against its baseline.

Each recipe runs in its own process (``harness run``, forked by the run zygote of
:mod:`harness.run.runtime.child`: a process of its own, so that peak memory and throughput are its own) into
``<out>/<recipe>/``; the verdicts are collected into a JUnit XML file
(one testcase per check of every verdict, every tier, the replay probe and the candidates included; a
recipe without a verdict is one failing testcase), a Markdown table (also appended to
``$GITHUB_STEP_SUMMARY`` when set) and ``<out>/report.html``. Exit 1 on any regression, refusal,
failed run or missing baseline; 0 when every recipe passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.commands import add_simulate_arguments, as_asked, chosen_profile, steps_count
from harness.errors import EXIT_FINDINGS, EXIT_OK, HarnessError
from harness.jsonio import write_bytes_atomic, write_json_atomic, write_text_atomic
from harness.judge.tiers import CKPT_RESUME, GROUPS, TIER_ORDER, make_check
from harness.records.base import dump
from harness.records.gate import Gate, GateEntry
from harness.records.verdict import Check, Verdict

HELP = "Run every recipe at smoke scale and judge it; JUnit XML + Markdown summary; non-zero on any regression."


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
    p.add_argument("--tier", choices=TIER_ORDER, help="judge every recipe by this tier (default: each run's "
                   "strictest eligible one; a runner that cannot reproduce the baselines bitwise replays them)")
    add_simulate_arguments(p)
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


def run_one(recipe: str, profile: str, args: argparse.Namespace) -> GateEntry:
    from harness.config.profiles import load_profile
    from harness.judge.baseline import reference_path

    run_dir = args.out / recipe
    bpath = reference_path(recipe, profile, args.scale, load_profile(profile).get("reference_profile"), args.baselines)
    if not bpath.is_file():  # nothing to judge against: fail fast instead of training first
        line = (f"NO-BASELINE {recipe} {profile}:{args.scale} no baseline at {bpath}; record one with `harness "
                f"record-baseline {recipe} --profile {profile} --scale {args.scale} --seeds 3`")
        print(line, flush=True)
        return GateEntry(recipe=recipe, status="no-baseline", summary_line=line, run_dir=None, verdict=None,
                         checks=[], reasons=[line.split(" ", 3)[3]])
    if (run_dir / "manifest.json").exists():
        import shutil

        shutil.rmtree(run_dir)  # the gate owns <out>/<recipe>/: a previous gate's run is replaced
    from harness.run.runtime.child import harness_run
    from harness.run.runtime.run_args import RunSpec

    spec = RunSpec(recipe, profile, args.scale, out=str(run_dir), steps=args.steps, runtime=args.runtime, quiet=True,
                   tier=args.tier, baseline=str(bpath), simulate=args.simulate, nnodes=args.nnodes)
    print(f"gate: {recipe} ...", file=sys.stderr, flush=True)
    proc = harness_run(spec, capture_output=True)
    vpath = run_dir / "verdict.json"
    if vpath.is_file():
        from harness.records.base import read

        v = read(vpath, Verdict, "verdict")
        out = GateEntry(recipe=recipe, status=v.status, summary_line=v.summary_line, run_dir=str(run_dir),
                        verdict=v, checks=[], reasons=list(v.reasons))
    else:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        out = GateEntry(recipe=recipe, status="error", summary_line=f"ERROR {recipe}: run exited {proc.returncode}: "
                        f"{tail}", run_dir=str(run_dir) if run_dir.exists() else None, verdict=None, checks=[],
                        reasons=[tail])
    print(out.summary_line, flush=True)
    return out


def ckpt_resume(entry: GateEntry, profile: str, args: argparse.Namespace) -> GateEntry:
    """``entry`` with the checkpoint-resume check (N straight vs N/2 + resume N/2, bitwise)."""
    from harness.config.recipe import resolve
    from harness.run.resume_check import ckpt_resume_check

    print(f"gate: {entry.recipe} ckpt-resume ...", file=sys.stderr, flush=True)
    try:
        check = ckpt_resume_check(as_asked(args, resolve(entry.recipe, profile, args.scale)),
                                  args.out / f"{entry.recipe}-ckpt-resume", args.ckpt_resume_steps)
        ok = bool(check["pass"])
        detail = "bitwise equal" if ok else f"first mismatch: {check['first_mismatch']}"
    except HarnessError as err:
        ok, detail = False, err.one_line()
    c = make_check(CKPT_RESUME, "metrics.jsonl", None, None, None, 0.0, ok, args.ckpt_resume_steps, [], detail)
    reasons = entry.reasons + ([] if ok else [f"{CKPT_RESUME}: {detail}"])
    status = "fail" if entry.status == "pass" and not ok else entry.status
    return entry.model_copy(update={"checks": [*entry.checks, c], "reasons": reasons, "status": status})


def _numbers(c: Check) -> str:
    at = f" at step {c.step}" if c.step is not None else ""
    return (f"{c.group} {c.metric}{at}: run {c.run_value!r}, reference {c.ref_value!r}, tolerance {c.tolerance!r}"
            + (f", failing steps {c.failing_steps}" if c.failing_steps else "") + f" — {c.detail}")


def junit(gate: Gate) -> ET.ElementTree:
    """JUnit XML: one testcase per check (classname ``gate.<profile>.<recipe>``, name ``<group>:<metric>``), a
    failure with its numbers for each failed one; a whole-run check the judge could not make (throughput on a busy
    machine, memory across a software change: the verdict's ``unjudged``) is a skipped testcase with why; a recipe
    whose verdict failed without a failing check (a refusal, a missing baseline, a run that stopped, a warm-start
    finding) adds one failing ``verdict`` testcase with its reasons."""
    suite = ET.Element("testsuite", name=f"harness-gate-{gate.profile}")
    n = fails = skips = 0
    for e in gate.entries:
        cls = f"gate.{gate.profile}.{e.recipe}"
        cases = [(f"{c.group}:{c.metric}", None if c.passed else ("failure", c.detail or c.group, _numbers(c)))
                 for c in e.all_checks()]
        cases += [(f"{u.group}:{u.metric}", ("skipped", u.reason, u.reason))
                  for u in e.unjudged()]
        if e.status != "pass" and all(c.passed for c in e.all_checks()):
            lines = e.reasons or (e.verdict.notices if e.verdict else []) or [e.summary_line]
            cases.append(("verdict", ("failure", lines[0], "\n".join(lines))))
        for name, outcome in cases:
            n += 1
            tc = ET.SubElement(suite, "testcase", classname=cls, name=name)
            if outcome is not None:
                tag, message, text = outcome
                fails += tag == "failure"
                skips += tag == "skipped"
                el = ET.SubElement(tc, tag, message=message[:500])
                if tag == "failure":
                    el.set("type", e.status)
                el.text = text
            ET.SubElement(tc, "system-out").text = e.summary_line
    suite.set("tests", str(n))
    suite.set("failures", str(fails))
    suite.set("errors", "0")
    suite.set("skipped", str(skips))
    root = ET.Element("testsuites", tests=str(n), failures=str(fails), errors="0", skipped=str(skips))
    root.append(suite)
    ET.indent(root)
    return ET.ElementTree(root)


def markdown(gate: Gate) -> str:
    groups = [g for g in GROUPS if any(g in e.counts() or g in e.unjudged_groups() for e in gate.entries)]
    ok = bool(gate.entries) and all(e.status == "pass" for e in gate.entries)
    lines = [f"### Gate ({gate.profile}, {gate.scale}): {'✅ pass' if ok else '❌ FAIL'}", "",
             "| recipe | status | tier | " + " | ".join(groups) + " |", "|---" * (3 + len(groups)) + "|"]
    for e in gate.entries:
        cells = []
        per, unjudged = e.counts(), e.unjudged_groups()
        for g in groups:
            got = per.get(g)
            cells.append(("⏭️ not judged" if g in unjudged else "—") if not got
                         else f"{'✅' if not got[1] else '❌'} {got[0] - got[1]}/{got[0]}")
        icon = {"pass": "✅", "fail": "❌"}.get(e.status, "⚠️")
        tier = e.verdict.tier if e.verdict and e.verdict.tier else "—"
        lines.append(f"| {e.recipe} | {icon} {e.status} | {tier} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- `{e.summary_line}`" for e in gate.entries]
    for e in gate.entries:
        for reason in e.reasons if e.status != "pass" else []:
            lines.append(f"  - {e.recipe}: {reason}")
    return "\n".join(lines) + "\n"


def execute(args: argparse.Namespace) -> int:
    from harness.judge.report import write_gate_report

    profile = chosen_profile(args)
    recipes = _recipes(args, profile)  # bad names are refused before anything is written
    args.out.mkdir(parents=True, exist_ok=True)
    entries = [run_one(r, profile, args) for r in recipes]
    if args.ckpt_resume_steps:
        entries = [ckpt_resume(e, profile, args) if e.status in ("pass", "fail") else e for e in entries]
    gate = Gate(schema_version=1, profile=profile, scale=args.scale, entries=entries)
    write_json_atomic(args.out / "gate.json", dump(gate))
    md = markdown(gate)
    if args.summary:
        write_text_atomic(args.summary, md)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(md)
    if args.junit:
        root = junit(gate).getroot()
        assert root is not None
        write_bytes_atomic(args.junit, ET.tostring(root, encoding="utf-8", xml_declaration=True))
    write_gate_report(args.out, gate)
    sys.stdout.write(md)
    ok = bool(entries) and all(e.status == "pass" for e in entries)
    return EXIT_OK if ok else EXIT_FINDINGS
