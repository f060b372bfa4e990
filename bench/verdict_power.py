"""False-alarm rate and detection power of the verdict tiers, measured.

Runs a recipe with seeds that are not in its baseline (each must PASS the statistical tier: a FAIL
is a false alarm) and with four injected faults (each must FAIL), judged ``--tier statistical``
(the tier's own checks count; a throughput or memory miss is listed apart, since it measures the
machine's load at the moment, not the numerics);
with ``--replay`` the same four faults are also replayed on the baseline's rollouts
(``--tier replay``: each must FAIL within the first 3 steps). Runs go ``--jobs`` at a time, each
with the numerics pin's thread count. Writes ``verdict_power.json`` and a Markdown table
(``verdict_power.md``) under ``--out``. A run already judged there (its ``verdict.json`` exists) is
re-read (with ``--rejudge``: judged again against today's baseline and rules), not re-run, so an
interrupted campaign continues where it stopped; a run directory left without a verdict is kept and
the job runs again beside it (``run-NN.retry1`` …).

    python bench/verdict_power.py qwen3_vl_30b --seeds 20 --first-seed 1000 --jobs 2 --out runs/power
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import time
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
        if key.startswith("seed "):
            yield None, int(key.split()[1]), run_dir
        elif (m := FAULT_RUN.match(key)):
            yield m["fault"], int(m["seed"]) if m["seed"] else None, run_dir


def run_one(recipe: str, out: Path, *, tier: str, sets: list[str], env: dict[str, str], profile: str,
            baseline: str | None) -> dict:
    cmd = [sys.executable, "-m", "harness", "run", recipe, "--profile", profile, "--runtime", "local", "--out",
           str(out), "--quiet", "--tier", tier]
    cmd += ["--baseline", baseline] if baseline else []
    for s in sets:
        cmd += ["--set", s]
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                **env}
    t0 = time.time()
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, check=False)
    return read_result(out, tier, proc.returncode, time.time() - t0, proc.stderr)


def rejudge(out: Path, tier: str, baseline: str | None) -> None:
    """Judge a finished run again (``harness compare``): the baseline or the tier's rule changed, the run did not."""
    cmd = [sys.executable, "-m", "harness", "compare", str(out), "--tier", tier, "--no-report"]
    cmd += ["--baseline", baseline] if baseline else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def read_result(out: Path, tier: str, code: int | None = None, wall: float = 0.0, stderr: str = "") -> dict:
    verdict_file = out / "verdict.json"
    if not verdict_file.is_file():
        return {"dir": str(out), "status": "error", "exit": code, "wall_s": wall,
                "error": (stderr.strip().splitlines() or ["no verdict"])[-1]}
    v = json.loads(verdict_file.read_text())
    bad = [c for c in v["checks"] if not c["passed"] and c["group"] == tier]
    stat = {c["metric"]: c["detail"] for c in v["checks"] if c["group"] == "statistical"}
    other = sorted({c["group"] for c in v["checks"] if not c["passed"] and c["group"] != tier})
    # the tier's own outcome: a throughput miss on a loaded machine is not the tier's false alarm
    return {"dir": str(out), "status": "fail" if bad else "pass", "verdict": v["status"], "exit": code,
            "wall_s": round(wall, 1), "other_failed_groups": other,
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
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--summarize", action="store_true", help="only re-read the verdicts of runs already under --out")
    ap.add_argument("--no-faults", action="store_true", help="only the seed runs (the faults measured elsewhere)")
    ap.add_argument("--rejudge", action="store_true", help="judge the runs already under --out again (after the "
                    "baseline or the tiers changed) before reading their verdicts")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, dict] = {}
    for s in range(args.first_seed, args.first_seed + args.seeds):
        jobs[f"seed {s}"] = dict(tier="statistical", sets=[f"seed={s}"], env={}, expect="pass")
    if args.replay:  # the control: the baseline's own recipe replayed here must pass
        jobs["no fault (replay)"] = dict(tier="replay", sets=[], env={}, expect="pass")
    for name, f in ({} if args.no_faults else FAULTS).items():
        sets = [x.format(lr=args.lr) for x in f.get("set", [])]
        for k in range(args.fault_seeds):
            seed = args.fault_seed + k
            key = f"{name} (statistical)" if args.fault_seeds == 1 else f"{name} (statistical, seed {seed})"
            jobs[key] = dict(tier="statistical", sets=sets + [f"seed={seed}"], env=f.get("env", {}), expect="fail")
        if args.replay:
            jobs[f"{name} (replay)"] = dict(tier="replay", sets=sets, env=f.get("env", {}), expect="fail")
    results: dict[str, dict] = {}
    todo: dict[str, Path] = {}
    for i, (name, j) in enumerate(jobs.items()):
        tries = [args.out / f"run-{i:02d}"]
        while tries[-1].exists():
            tries.append(args.out / f"run-{i:02d}.retry{len(tries)}")
        judged = [d for d in tries if (d / "verdict.json").is_file()]
        if judged and args.rejudge:
            rejudge(judged[-1], j["tier"], args.baseline)
        if judged or args.summarize:
            results[name] = {**read_result(judged[-1] if judged else tries[0], j["tier"]), "expect": j["expect"]}
        else:
            todo[name] = tries[-1]
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = {pool.submit(run_one, args.recipe, out, tier=jobs[name]["tier"], sets=jobs[name]["sets"],
                            env=jobs[name]["env"], profile=args.profile, baseline=args.baseline): name
                for name, out in todo.items()}
        for fut in cf.as_completed(futs):
            name = futs[fut]
            results[name] = {**fut.result(), "expect": jobs[name]["expect"]}
            r = results[name]
            print(f"{name}: {r['status']} (expected {r['expect']}) {r.get('summary', r.get('error', ''))[:160]}",
                  flush=True)
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
