"""`harness run RECIPE`: validate → safety → pre-flight → train → compare → verdict → report.

Exit codes: 0 pass (or recorded without a baseline), 1 regression or safety findings, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.commands import add_override_argument, add_target_arguments, chosen_profile, steps_count
from harness.config.recipe import Resolved, parse_override, resolve
from harness.config.safety.check import preflight
from harness.errors import EXIT_OK, HarnessError
from harness.run.record import default_run_dir
from harness.run.runtime.launch import choose_runtime, train_stage

HELP = "Run a recipe (GRPO training) and judge it against its baseline."
RUNTIMES = ("auto", "local", "docker", "torchrun")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--steps", type=steps_count(), help="GRPO steps (default: the recipe's trainer.total_training_steps)")
    add_override_argument(p)
    p.add_argument("--runtime", choices=RUNTIMES, default=os.environ.get("HARNESS_RUNTIME_DEFAULT", "auto"),
                   help="where to run: local process, docker (pinned image), torchrun (N processes), "
                        "auto = docker when the daemon and image are there, else local")
    p.add_argument("--image", help="container image for --runtime docker (default: the profile's)")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("--out", type=Path, help="run directory (default: runs/<recipe>-<profile>-<utc time>/)")
    p.add_argument("--baseline", type=Path, help="baseline file (default: baselines/<recipe>/<profile>-<scale>.json)")
    p.add_argument("--tier", choices=("exact", "replay", "band", "statistical"),
                   help="how to judge: exact (bitwise), replay (train on the baseline's recorded rollouts, "
                        "teacher-forced; also across profiles), band, statistical (another seed or machine, free "
                        "run); default: exact when this machine can reproduce the baseline bitwise, else replay")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an unfinished run from its newest "
                   "complete checkpoint (the original --set overrides and --steps are reused; see "
                   "harness/run/resume.py for the rule)")
    p.add_argument("--candidates", type=int, metavar="N", help="when the statistical tier decides the verdict: "
                   "judge the median of N runs, this one and N-1 of other seeds trained after it into "
                   "RUN_DIR/candidates/ (default: the baseline policy's candidate_runs; 1 = this run alone)")
    p.add_argument("--no-replay-probe", action="store_true", help="when the statistical tier decides the verdict: "
                   "do not replay the baseline's first steps with this run's settings into RUN_DIR/replay-probe/ "
                   "(faults below the seeds' spread then go unseen; the verdict says so)")
    p.add_argument("--no-report", action="store_true", help="judge without rendering report.html and its plots "
                   "(verdict.json and the summary line are written as always)")
    p.add_argument("--nproc-per-node", type=int, help="torchrun processes per node on the cpu profile "
                   "(accelerator profiles use trainer.n_gpus_per_node)")
    # internal: train and record only (inside containers, torchrun ranks' launchers, child runs, Slurm nodes);
    # hidden from --help, and bound by the same run-directory rules as a full run
    p.add_argument("--stage", choices=("all", "train"), default="all", help=argparse.SUPPRESS)


def resolve_args(args: argparse.Namespace, sets: list[str] | None = None) -> Resolved:
    """Resolve the recipe for ``args`` (``sets`` replaces ``args.overrides`` when given)."""
    if args.steps is not None and args.steps < 1:
        raise HarnessError(f"--steps must be >= 1, got {args.steps}", key_path="--steps", fix="give a positive count")
    return resolve(args.recipe, chosen_profile(args), args.scale, tuple(args.overrides if sets is None else sets))


def plan_replay(args: argparse.Namespace, res: Resolved, runtime: str) -> Path | None:
    """The baseline to replay, or None for a free run.

    Forced with ``--tier replay``; chosen by default when the baseline has recorded rollouts, the run
    uses the baseline's seed and runs locally, but this machine cannot reproduce it bitwise (another
    software version, numerics pin, device, …): then a free run could only be judged statistically,
    while a replay checks every training step.
    """
    from harness.judge.baseline import default_path, load_baseline
    from harness.run import environment

    forced = getattr(args, "tier", None)
    path = args.baseline or default_path(res.name, res.profile_name, res.scale)
    if forced == "replay":
        if not path.is_file():
            raise HarnessError("no baseline to replay", file=str(path),
                               fix="record one (`harness record-baseline`) or name it with --baseline")
        if runtime != "local":
            raise HarnessError(f"a replay runs locally, not with --runtime {runtime}", key_path="--runtime",
                               fix="use --runtime local")
        return path
    if forced is not None or args.stage == "train" or runtime != "local" or not path.is_file() \
            or getattr(args, "resume", None) is not None:
        return None
    baseline = load_baseline(path)
    if not baseline.get("replay") or res.spec.seed != baseline["primary_seed"]:
        return None
    live = environment.live_summary(res, "local", 1)
    blocking = [c.text() for c in environment.changes(live, baseline["environment"]) if c.blocks_exact]
    if not blocking:
        return None
    sys.stderr.write(f"notice: this machine cannot reproduce the baseline bitwise ({'; '.join(blocking)}): "
                     "replaying its recorded rollouts instead (--tier replay)\n")
    return path


def _listing(run_dir: Path) -> list[str] | None:
    """The names in ``run_dir`` (None when it does not exist); a one-line error when it is not a directory."""
    try:
        return sorted(os.listdir(run_dir))
    except FileNotFoundError:
        if os.path.islink(run_dir):
            raise HarnessError("the run directory is a dangling symbolic link", file=str(run_dir),
                               fix="choose another --out") from None
        return None
    except NotADirectoryError:
        raise HarnessError("names a file, not a directory", file=str(run_dir), key_path="--out",
                           fix="give a new or empty directory for the run") from None
    except OSError as err:
        raise HarnessError(f"cannot use the run directory ({err.strerror})", file=str(run_dir), key_path="--out",
                           fix="choose another --out") from None


def _same_run(run_dir: Path, res: Resolved) -> bool:
    """A run of ``res`` (recipe, profile, scale) in progress: what other Slurm nodes find in ``--out``."""
    from harness.jsonio import load_json_strict

    try:
        m = load_json_strict(run_dir / "manifest.json", follow_symlinks=False)
        return (m["recipe"]["name"], m["profile"], m["scale"], m["status"]) == (res.name, res.profile_name, res.scale,
                                                                                "running")
    except (HarnessError, KeyError, TypeError):
        return False


def choose_run_dir(args: argparse.Namespace, res: Resolved) -> Path:
    """The run directory: new or empty, or a run to continue; sets ``args.resume`` when the run there is
    continued (``resume_mode: auto``). Anything else is refused: nothing in it is overwritten."""
    from harness.run.resume import auto_resumable

    if args.resume is not None:
        if _listing(args.resume) is None:
            raise HarnessError("run directory not found", file=str(args.resume), key_path="--resume",
                               fix="give the directory of the run to continue")
        return args.resume
    run_dir = args.out or default_run_dir(res.name, res.profile_name)
    names = _listing(run_dir)
    if not names:
        return run_dir
    if "manifest.json" in names:
        if res.spec.trainer.resume_mode == "auto" and auto_resumable(run_dir, res):
            args.resume, args.auto_resumed = run_dir, True  # announced once the resume has been checked
            return run_dir
        if args.stage == "train" and _same_run(run_dir, res):
            return run_dir  # a multi-node job: the first node's rank 0 has started the record
        raise HarnessError("run directory already holds a run", file=str(run_dir), key_path="--out",
                           fix="choose another --out, or --resume it")
    raise HarnessError(f"run directory is not empty and holds no run ({len(names)} entries, e.g. '{names[0]}')",
                       file=str(run_dir), key_path="--out", fix="give a new or empty directory for the run")


def check_resume(args: argparse.Namespace, res: Resolved, run_dir: Path, runtime: str) -> None:
    """Refuse a resume before launching anything (each rank checks again); default --steps to the original."""
    from harness.run.resume import plan_resume

    if runtime == "docker":
        return  # checked inside the container
    if runtime == "torchrun":
        from harness.run.runtime.rank import cpu_world

        res = cpu_world(res, args.nproc_per_node or res.spec.trainer.n_gpus_per_node)
    world = res.spec.trainer.nnodes * res.spec.trainer.n_gpus_per_node if runtime == "torchrun" else 1
    plan = plan_resume(run_dir, res, list(args.overrides), world)
    if args.steps is None:
        args.steps = plan.requested


def execute(args: argparse.Namespace) -> int:
    from harness.run.resume import read_manifest, resume_overrides

    if getattr(args, "candidates", None) is not None and not 1 <= args.candidates <= MAX_CANDIDATES:
        raise HarnessError(f"--candidates must be 1..{MAX_CANDIDATES}, got {args.candidates}",
                           key_path="--candidates", fix="give the number of runs to judge together, e.g. 3")
    if args.baseline is not None and args.stage == "all":
        from harness.judge.compare import require_baseline_file

        require_baseline_file(args.baseline)  # before any training: a typo is bad input
    if args.resume is not None and args.profile is None:
        args.profile = read_manifest(args.resume).get("profile")
    res = resolve_args(args)
    run_dir = choose_run_dir(args, res)
    if args.resume is not None:  # the original run's --set overrides first, then the ones given now
        res = resolve_args(args, resume_overrides(run_dir, args.overrides))
    preflight(res)
    if args.stage == "train":
        runtime, image = ("torchrun", None) if args.runtime == "torchrun" else ("local", None)
    else:
        runtime, image = choose_runtime(args.runtime, res, args.image)
    if args.resume is not None:
        check_resume(args, res, run_dir, runtime)
        if getattr(args, "auto_resumed", False):
            sys.stderr.write(f"notice: continuing the unfinished run in {run_dir} (trainer.resume_mode auto)\n")
    replay = plan_replay(args, res, runtime)
    train_stage(res, args, run_dir, runtime, image, replay)
    if args.stage == "train":
        return EXIT_OK

    def without_seed() -> list[str]:
        return [o for o in args.overrides if parse_override(o)[0] != "seed"]

    def train_candidate(seed: int, cand_dir: Path) -> None:
        sets = [*without_seed(), f"seed={seed}"]
        cand_args = argparse.Namespace(**{**vars(args), "overrides": sets, "resume": None})
        train_stage(resolve_args(args, sets), cand_args, cand_dir, runtime, image, None)

    def train_probe(baseline: Path, primary_seed: int, steps: int, where: Path) -> None:
        sets = without_seed()  # a replay starts from the baseline's policy: the baseline's seed
        if resolve_args(args, sets).config["seed"] != primary_seed:
            sets.append(f"seed={primary_seed}")
        probe_args = argparse.Namespace(**{**vars(args), "overrides": sets, "resume": None, "steps": steps,
                                           "tier": "replay"})
        train_stage(resolve_args(args, sets), probe_args, where, "local", None, baseline)

    return judge_and_report(res, run_dir, baseline=args.baseline or replay, quiet=args.quiet, tier=args.tier,
                            report=not getattr(args, "no_report", False), train_candidate=train_candidate,
                            train_probe=None if getattr(args, "no_replay_probe", False) else train_probe,
                            candidates=getattr(args, "candidates", None))


MAX_CANDIDATES = 9


def train_missing_candidates(run_dir: Path, verdict: Any, wanted: int | None,
                             train_candidate: Callable[[int, Path], None], quiet: bool) -> bool:
    """Train the candidate runs a statistical verdict lacks (:mod:`harness.judge.candidates`); True if any was.

    A candidate directory that exists but is not a finished candidate of this run is refused, not overwritten.
    """
    from harness.judge import candidates

    want = wanted if wanted is not None else (verdict.policy or {}).get("statistical", {}).get("candidate_runs", 1)
    have = {c["seed"] for c in verdict.candidates}
    taken = {verdict.baseline["primary_seed"], *verdict.baseline["noise_seeds"]} if verdict.baseline else set()
    todo = [s for s in candidates.candidate_seeds(verdict.run["seed"], want, taken) if s not in have]
    todo = todo[:max(0, want - 1 - len(have))]
    for i, seed in enumerate(todo, 1):
        cand_dir = candidates.candidate_dir(run_dir, seed)
        if cand_dir.exists() or cand_dir.is_symlink():
            raise HarnessError("holds something that is not a finished candidate run of this run", file=str(cand_dir),
                               fix=LEFTOVER_FIX)
        if not quiet:
            sys.stderr.write(f"notice: the statistical tier judges the median of {want} runs: training candidate "
                             f"seed {seed} ({i} of {len(todo)}) into {cand_dir}\n")
        cand_dir.parent.mkdir(parents=True, exist_ok=True)
        train_candidate(seed, cand_dir)
    return bool(todo)


LEFTOVER_FIX = ("remove it; `harness compare RUN_DIR` then judges the run without it (with a notice), and "
                "`harness run` trains it when the run is repeated")


def train_missing_probe(run_dir: Path, verdict: Any, train_probe: Callable[[Path, int, int, Path], None],
                        quiet: bool) -> bool:
    """Train the replay probe a statistical verdict lacks and can have (the judge decides which:
    ``verdict.probe_wanted``, :mod:`harness.judge.probe`); True if it was.

    A probe directory that exists but is not this run's finished probe is refused, not overwritten.
    """
    from harness.judge import probe

    want = verdict.probe_wanted
    if want is None:
        return False
    where = probe.probe_dir(run_dir)
    if where.exists() or where.is_symlink():
        raise HarnessError("holds something that is not a finished replay probe of this run", file=str(where),
                           fix=LEFTOVER_FIX)
    if not quiet:
        sys.stderr.write(f"notice: the statistical tier also replays the baseline's first {want.steps} steps with "
                         f"this run's settings (a replay probe) into {where}\n")
    train_probe(want.baseline, want.primary_seed, want.steps, where)
    return True


def judge_and_report(res: Resolved, run_dir: Path, *, baseline: Path | None, quiet: bool,
                     tier: str | None = None, report: bool = True,
                     train_candidate: Callable[[int, Path], None] | None = None,
                     train_probe: Callable[[Path, int, int, Path], None] | None = None,
                     candidates: int | None = None) -> int:
    """Judge the run and write its verdict (and report). When the statistical tier decides, first train what
    the verdict lacks (candidate runs, the replay probe) and judge again with them."""
    from harness.judge.compare import judge, write_verdict

    verdict = judge(run_dir, res, baseline_path=baseline, tier=tier, write=False)
    if verdict.tier == "statistical" and verdict.status in ("pass", "fail"):
        trained = train_candidate is not None and train_missing_candidates(run_dir, verdict, candidates,
                                                                          train_candidate, quiet)
        trained = (train_probe is not None and train_missing_probe(run_dir, verdict, train_probe, quiet)) or trained
        if trained:
            verdict = judge(run_dir, res, baseline_path=baseline, tier=tier, write=False)
    write_verdict(run_dir, verdict)
    if report:
        from harness.judge.report import write_run_report

        write_run_report(run_dir, verdict)
    print(verdict.summary_line())
    if not quiet:
        print(f"run directory: {run_dir}")
    return verdict.exit_code
