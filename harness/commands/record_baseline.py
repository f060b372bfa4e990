"""``harness record-baseline RECIPE --profile P --seeds N``: record the reference a recipe is judged against.

Runs N seeded runs, each in its own process (the recipe's seed, then ``seed + k`` via ``--set
seed=...``) under ``runs/baseline-<recipe>-<profile>-<scale>-<time>/seed-<s>/``, packs the primary
run's rollouts for the replay tier, measures the replay noise, and writes
``baselines/<recipe>/<profile>-<scale>.json`` (+ ``.rollouts.npz``) once, atomically, when all of
them finished: a killed recording never leaves a partial baseline. An existing baseline is only
replaced with ``--force``. ``--throughput-only`` adds this machine's throughput reference to an
existing baseline instead (throughput is only compared between runs on the same device model).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path

from harness.commands import add_target_arguments, chosen_profile, steps_count
from harness.errors import EXIT_OK, HarnessError

HELP = "Record a baseline from N seeded runs (noise floor, throughput, memory, tolerance policy)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--seeds", type=int, default=5, help="seeded runs: the recipe's seed plus N-1 more (default: 5; "
                   "the statistical tier needs at least 5 for its olympic mean)")
    p.add_argument("--throughput-only", action="store_true", help="add this machine's throughput reference (device "
                   "model and thread count) to the existing baseline, from --seeds runs of the recipe's seed")
    p.add_argument("--steps", type=steps_count(), help="GRPO steps per run (default: the recipe's total)")
    p.add_argument("--force", action="store_true", help="replace an existing baseline")
    p.add_argument("--jobs", type=int, default=1, help="seeds run at a time (default 1; with more, the throughput "
                   "they record is contended: re-measure it with --throughput-only --force; CPU runs side by side wait "
                   "passively between parallel regions unless OMP_WAIT_POLICY is set)")
    p.add_argument("--out", type=Path, help="baseline file (default: baselines/<recipe>/<profile>-<scale>.json)")
    p.add_argument("--runs-dir", type=Path, help="where the seeded runs go (default: runs/baseline-...)")
    p.add_argument("--quiet", action="store_true", help="no per-step progress")
    p.add_argument("--from-log", action="append", default=[], metavar="FORMAT:FILE",
                   help="record from another trainer's logs instead of running (once per run, the primary first; "
                        "e.g. verl:metrics.jsonl): band and statistical tiers only, seeds and environment unknown")


def execute(args: argparse.Namespace) -> int:
    from harness.config.recipe import resolve
    from harness.config.safety.check import preflight
    from harness.judge.baseline import default_path
    from harness.judge.baseline_record import record
    from harness.judge.foreign import REWARD
    from harness.run.rundir import default_run_dir

    if args.steps is not None and args.steps < 1:
        raise HarnessError(f"--steps must be >= 1, got {args.steps}", key_path="--steps", fix="give a positive count")
    profile = chosen_profile(args)
    res = resolve(args.recipe, profile, args.scale)
    out = args.out or default_path(res.name, profile, args.scale)
    if args.from_log:
        return _from_logs(args, res, out)
    preflight(res)
    runs_dir = args.runs_dir or default_run_dir(f"baseline-{res.name}", f"{profile}-{args.scale}")
    command = "harness record-baseline " + " ".join(shlex.quote(a) for a in sys.argv[sys.argv.index(
        "record-baseline") + 1:]) if "record-baseline" in sys.argv else \
        f"harness record-baseline {res.name} --profile {profile} --scale {args.scale} --seeds {args.seeds}"
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if args.throughput_only:
        from harness.judge.baseline_record import record_throughput

        ref = record_throughput(args.recipe, profile, args.scale, runs=args.seeds, steps=args.steps, out=out,
                                runs_dir=runs_dir, progress=not args.quiet, force=args.force, log=log)
        print(f"wrote {out}: throughput reference for {ref.device_model} ({ref.threads} threads): "
              f"{ref.value:,.0f} tok/s (spread {ref.relative_spread * 100:.1f}%)")
        return EXIT_OK
    b = record(args.recipe, profile, args.scale, seeds=args.seeds, steps=args.steps, out=out, runs_dir=runs_dir,
               command=command, progress=not args.quiet, force=args.force, jobs=args.jobs, log=log)
    tp = b.throughput.references[0]
    reward = b.metrics.get(REWARD)
    score = reward.values[-1] if reward and reward.values else None
    print(f"wrote {out}: {b.steps} steps x {1 + len(b.noise_seeds)} seeds; final reward "
          f"{score if score is None else round(score, 4)}; throughput {tp.value:,.0f} tok/s on {tp.device_model} "
          f"(spread {tp.relative_spread * 100:.1f}%); peak memory {b.memory.value:.3f} GB; "
          + (f"replay noise measured ({b.replay.perturbation})" if b.replay else
             "no replay tier (the model is too large to keep its initial policy; see the runs' manifests)"))
    return EXIT_OK


def _from_logs(args: argparse.Namespace, res: object, out: Path) -> int:
    """A baseline from other trainers' logs (harness.judge.foreign), written once, atomically."""
    from harness.judge.baseline import DEFAULT_POLICY, write_baseline
    from harness.judge.foreign import FOREIGN_TIERS, REWARD, build_log_baseline

    bad = [f"--{k.replace('_', '-')}" for k in ("throughput_only", "steps", "runs_dir") if getattr(args, k)]
    if bad:
        raise HarnessError(f"{bad[0]} does not apply to --from-log (nothing is run)", key_path=bad[0],
                           fix="leave it out")
    if os.path.lexists(out) and not args.force:
        raise HarnessError("a baseline already exists", file=str(out),
                           fix="pass --force to replace it (review the diff before committing)")
    command = "harness record-baseline " + " ".join(shlex.quote(a) for a in sys.argv[sys.argv.index(
        "record-baseline") + 1:]) if "record-baseline" in sys.argv else \
        f"harness record-baseline {args.recipe} --from-log " + " --from-log ".join(args.from_log)
    doc = build_log_baseline(args.from_log, res, command=command, policy=DEFAULT_POLICY)
    b = write_baseline(out, doc)
    reward = b.metrics.get(REWARD)
    score = (reward.seed_window_means if reward else None) or [math.nan]
    logs = b.logs or []
    print(f"wrote {out}: {b.steps} steps x {len(logs)} {logs[0].trainer if logs else '?'} logs; "
          f"{len(b.metrics)} metrics ({', '.join(FOREIGN_TIERS)}); training reward window means "
          f"{min(score):.4f}..{max(score):.4f}; no throughput reference (the logs' machine is unknown)")
    return EXIT_OK
