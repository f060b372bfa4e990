"""False-alarm rate and detection power of the verdict tiers, measured.

Runs a recipe with seeds that are not in its baseline (each must PASS the statistical tier: a FAIL
is a false alarm) and with four injected faults (each must FAIL), judged ``--tier statistical``
(the tier's own checks count; a throughput or memory miss is listed apart, since it measures the
machine's load at the moment, not the numerics). A statistical verdict judges ``--candidates``
runs by their median (default: the baseline policy's ``candidate_runs``): the seed's run and
candidates of other seeds (:mod:`harness.judge.candidates`), which the campaign trains as runs of
their own, in parallel, then moves under the run's ``candidates/`` and judges with ``harness
compare`` — what ``harness run`` does one after the other. Likewise its replay probe
(:mod:`harness.judge.probe`: the baseline's first steps replayed with the run's settings), which
a statistical verdict also holds to the replay tolerances.
With ``--replay`` the same four faults are also replayed on the baseline's rollouts
(``--tier replay``: each must FAIL within the first 3 steps). Runs go ``--jobs`` at a time, each
with the numerics pin's thread count. Writes ``verdict_power.json`` and a Markdown table
(``verdict_power.md``) under ``--out``. A finished run there is kept, not re-run, so an interrupted
campaign continues where it stopped (``--rejudge``: judge every verdict again against today's
baseline and rules); a run left unfinished is removed and trained again (the campaign owns
everything under ``--out``).

    python bench/verdict_power.py qwen3_vl_30b --seeds 20 --first-seed 1000 --jobs 2 --out runs/power
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAULT_RUN = re.compile(r"^(?P<fault>.+) \(statistical(?:, seed (?P<seed>\d+))?\)$")
FAULTS = {
    "lr x100": {"set": ["actor_rollout_ref.actor.optim.lr={lr}"]},
    "KL coefficient 0": {"set": ["actor_rollout_ref.actor.kl_loss_coef=0"]},
    "flipped advantage sign": {"env": {"HARNESS_FAULT": "flip-advantage"}},
    "clip range 0.2 -> 0.5": {"set": ["actor_rollout_ref.actor.clip_ratio_low=0.5",
                                      "actor_rollout_ref.actor.clip_ratio_high=0.5"]},
}


def campaign_runs(out: Path) -> Iterator[tuple[str | None, int | None, Path]]:
    """(fault, or None for a clean seed; seed, or None when a fault ran at one seed; run directory) of each
    statistical run of the campaign under ``out`` that produced metrics. A run directory recorded on another
    machine is looked up under ``out`` by its name."""
    doc = json.loads((out / "verdict_power.json").read_text())
    for key, r in doc["runs"].items():
        run_dir = Path(r["dir"])
        run_dir = run_dir if run_dir.is_dir() else out / run_dir.name
        if r.get("status") == "error" or not (run_dir / "metrics.jsonl").is_file():
            continue
        cands = [(int(d.name.split("-")[1]), d) for d in sorted((run_dir / "candidates").glob("seed-*"))
                 if (d / "metrics.jsonl").is_file()]
        if key.startswith("seed "):
            yield None, int(key.split()[1]), run_dir
            yield from ((None, s, d) for s, d in cands)
        elif (m := FAULT_RUN.match(key)):
            yield m["fault"], int(m["seed"]) if m["seed"] else None, run_dir
            yield from ((m["fault"], s, d) for s, d in cands)


def harness_cmd(*args: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return [sys.executable, "-m", "harness", *args], env


def train_unit(recipe: str, out: Path, *, tier: str, sets: list[str], env: dict[str, str], profile: str,
               baseline: str | None, steps: int | None = None) -> tuple[int, str]:
    """One run (``harness run --candidates 1 --no-replay-probe``: the campaign trains a verdict's candidates and
    probe itself, in parallel)."""
    cmd, full_env = harness_cmd("run", recipe, "--profile", profile, "--runtime", "local", "--out", str(out),
                                "--quiet", "--no-report", "--tier", tier, "--candidates", "1",
                                "--no-replay-probe")
    cmd += ["--baseline", baseline] if baseline else []
    cmd += ["--steps", str(steps)] if steps else []
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, env={**full_env, **env}, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stderr


def rejudge(out: Path, tier: str, baseline: str | None) -> None:
    """Judge a run (``harness compare``) with the candidates now beside it, or after the baseline or the tier's
    rule changed."""
    cmd, env = harness_cmd("compare", str(out), "--tier", tier, "--no-report")
    cmd += ["--baseline", baseline] if baseline else []
    subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def is_done(run_dir: Path) -> bool:
    try:
        m = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return m.get("status") == "complete" and not (run_dir / "INCOMPLETE").exists()


def read_result(out: Path, tier: str, code: int | None = None, wall: float = 0.0, stderr: str = "") -> dict:
    verdict_file = out / "verdict.json"
    if not verdict_file.is_file():
        return {"dir": str(out), "status": "error", "exit": code, "wall_s": wall,
                "error": (stderr.strip().splitlines() or ["no verdict"])[-1]}
    v = json.loads(verdict_file.read_text())
    own = {tier, "replay"} if tier == "statistical" else {tier}  # a statistical verdict includes its replay probe
    bad = [c for c in v["checks"] if not c["passed"] and c["group"] in own]
    stat = {c["metric"]: c["detail"] for c in v["checks"] if c["group"] == "statistical"}
    other = sorted({c["group"] for c in v["checks"] if not c["passed"] and c["group"] not in own})
    # the tier's own outcome: a throughput miss on a loaded machine is not the tier's false alarm
    return {"dir": str(out), "status": "fail" if bad else "pass", "verdict": v["status"], "exit": code,
            "wall_s": round(wall, 1), "other_failed_groups": other,
            "candidates": [c["seed"] for c in v.get("candidates", [])],
            "replay_probe": (v.get("replay_probe") or {}).get("steps_compared"),
            "tier": v["tier"], "failed": [c["metric"] for c in bad],
            "first_failing_step": min((c["failing_steps"][0] for c in bad if c["failing_steps"]), default=None),
            "statistics": stat, "summary": v["summary_line"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--baseline", help="baseline file (default: the recipe's for the profile)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--fault-seed", type=int, default=2000, help="first seed of the statistical fault runs")
    ap.add_argument("--fault-seeds", type=int, default=1, help="statistical runs per fault (seeds from --fault-seed "
                    "on; with --fault-seed = --first-seed each pairs with a clean run: bench/fault_effects.py)")
    ap.add_argument("--lr", type=float, default=0.1, help="the lr x100 fault's learning rate")
    ap.add_argument("--replay", action="store_true", help="also replay each fault on the baseline's rollouts")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time")
    ap.add_argument("--steps", type=int, help="steps per run (default: the recipe's; fewer only to try the campaign "
                    "out: the tier then compares a shorter window)")
    ap.add_argument("--candidates", type=int, help="runs per statistical verdict (default: the baseline policy's "
                    "candidate_runs): the seed's run and candidates of other seeds (harness.judge.candidates)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--summarize", action="store_true", help="only re-read the verdicts of runs already under --out")
    ap.add_argument("--fault", nargs="+", choices=sorted(FAULTS), help="only these faults (default: all)")
    ap.add_argument("--no-faults", action="store_true", help="only the seed runs (the faults measured elsewhere)")
    ap.add_argument("--no-replay-probe", action="store_true", help="judge statistical verdicts without their replay probe (as `harness run --no-replay-probe`)")
    ap.add_argument("--rejudge", action="store_true", help="judge the runs already under --out again (after the "
                    "baseline or the tiers changed) before reading their verdicts")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from harness.judge.baseline import default_path, load_baseline
    from harness.judge.candidates import candidate_dir, candidate_seeds
    from harness.judge.probe import probe_dir, probe_steps

    base = load_baseline(Path(args.baseline) if args.baseline else default_path(args.recipe, args.profile, "smoke"))
    taken = {base["primary_seed"], *base["noise_seeds"]}
    runs_per_verdict = args.candidates or base["policy"]["statistical"].get("candidate_runs", 1)
    jobs: dict[str, dict] = {}
    for s in range(args.first_seed, args.first_seed + args.seeds):
        jobs[f"seed {s}"] = dict(tier="statistical", sets=[], seed=s, env={}, expect="pass")
    if args.replay:  # the control: the baseline's own recipe replayed here must pass
        jobs["no fault (replay)"] = dict(tier="replay", sets=[], seed=None, env={}, expect="pass")
    for name, f in ({} if args.no_faults else FAULTS).items():
        if args.fault and name not in args.fault:
            continue
        sets = [x.format(lr=args.lr) for x in f.get("set", [])]
        for k in range(args.fault_seeds):
            seed = args.fault_seed + k
            key = f"{name} (statistical)" if args.fault_seeds == 1 else f"{name} (statistical, seed {seed})"
            jobs[key] = dict(tier="statistical", sets=sets, seed=seed, env=f.get("env", {}), expect="fail")
        if args.replay:
            jobs[f"{name} (replay)"] = dict(tier="replay", sets=sets, seed=None, env=f.get("env", {}), expect="fail")
    # every run is a unit of its own (a verdict's candidates train in parallel with it, in a staging folder, and
    # move under RUN_DIR/candidates/ once both are complete); a unit left unfinished by an interrupted campaign
    # is removed and trained again: the campaign owns everything under --out
    # (job, where it trains, where it ends, --set, tier, steps)
    units: list[tuple[str, Path, Path | None, list[str], str, int | None]] = []
    for i, (name, j) in enumerate(jobs.items()):
        j["dir"] = args.out / f"run-{i:02d}"
        seed_set = [] if j["seed"] is None else [f"seed={j['seed']}"]
        units.append((name, j["dir"], None, j["sets"] + seed_set, j["tier"], args.steps))
        if j["tier"] == "statistical":
            for c in candidate_seeds(j["seed"], runs_per_verdict, taken):
                units.append((name, args.out / "stage" / f"run-{i:02d}-seed-{c}", candidate_dir(j["dir"], c),
                              j["sets"] + [f"seed={c}"], "statistical", args.steps))
            if base.get("replay") and not args.no_replay_probe:  # the probe replays with the baseline's own seed
                units.append((name, args.out / "stage" / f"run-{i:02d}-probe", probe_dir(j["dir"]), j["sets"],
                              "replay", min(probe_steps(base), args.steps or probe_steps(base))))

    def settle(unit: tuple[str, Path, Path | None, list[str], str, int | None]) -> bool:
        """Whether the unit is done (a finished candidate moved into place when its run is finished too)."""
        name, where, final, *_ = unit
        if final is not None and is_done(final):
            return True
        if not is_done(where):
            return False
        if final is not None and is_done(jobs[name]["dir"]):
            final.parent.mkdir(exist_ok=True)
            where.rename(final)
        return True

    todo = [] if args.summarize else [u for u in units if not settle(u)]
    for _, where, *_ in todo:
        if where.exists():
            shutil.rmtree(where)
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = {pool.submit(train_unit, args.recipe, u[1], tier=u[4], sets=u[3], env=jobs[u[0]]["env"],
                            profile=args.profile, baseline=args.baseline, steps=u[5]): u for u in todo}
        for fut in cf.as_completed(futs):
            code, err = fut.result()
            name, where = futs[fut][0], futs[fut][1]
            tail = (err.strip().splitlines() or [""])[-1][:160]  # exit 1 without a word: this run alone FAILed
            print(f"{name}: {where.name} exit {code} {tail}".rstrip(), flush=True)
    results: dict[str, dict] = {}
    for name, j in jobs.items():
        mine = [u for u in units if u[0] == name]
        settled = [settle(u) for u in mine]
        if not args.summarize and all(settled) and (len(mine) > 1 or args.rejudge):
            rejudge(j["dir"], j["tier"], args.baseline)  # with its candidates beside it
        results[name] = {**read_result(j["dir"], j["tier"]), "expect": j["expect"]}
        if not all(settled):
            results[name].update(status="error", error=f"{settled.count(False)} of {len(mine)} runs unfinished")
    ordered = {k: results[k] for k in jobs}
    seeds = [r for k, r in ordered.items() if k.startswith("seed ")]
    false_alarms = sum(r["status"] != "pass" for r in seeds)
    missed = [k for k, r in ordered.items() if r["expect"] != r["status"] and not k.startswith("seed ")]
    late = [k for k, r in ordered.items() if k.endswith("(replay)") and r["expect"] == "fail"
            and (r.get("first_failing_step") or 99) > 3]
    doc = {"recipe": args.recipe, "profile": args.profile, "false_alarms": false_alarms, "seed_runs": len(seeds),
           "unexpected_verdicts": missed, "replay_faults_failing_after_step_3": late, "runs": ordered}
    (args.out / "verdict_power.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["| run | expected | tier outcome | failed metrics (first failing step) | reward statistic | other checks |",
             "|---|---|---|---|---|---|"]
    for k, r in ordered.items():
        stat = r.get("statistics", {}).get("critic/score/mean", r.get("error", ""))
        failed = ", ".join(r.get("failed", [])) or "—"
        step = f" (step {r['first_failing_step']})" if r.get("first_failing_step") else ""
        others = ", ".join(r.get("other_failed_groups", [])) or "—"
        lines.append(f"| {k} | {r['expect']} | {r['status'].upper()} ({r.get('tier')}) | {failed}{step} | {stat} | "
                     f"{others} |")
    lines.append(f"\nFalse alarms: {false_alarms}/{len(seeds)}; other unexpected verdicts: {len(missed)} {missed}; "
                 f"replay faults first failing after step 3: {late}")
    (args.out / "verdict_power.md").write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 0 if false_alarms <= 1 and not missed and not late else 1


if __name__ == "__main__":
    raise SystemExit(main())
