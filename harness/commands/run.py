"""`harness run RECIPE`: validate → safety → pre-flight → train → compare → verdict → report.

Exit codes: 0 pass (or recorded without a baseline), 1 regression or safety findings, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.commands import (
    add_override_argument,
    add_simulate_arguments,
    add_target_arguments,
    as_asked,
    chosen_profile,
    steps_count,
)
from harness.config.recipe import Resolved, resolve
from harness.config.safety.check import preflight
from harness.errors import EXIT_FINDINGS, EXIT_OK, HarnessError
from harness.judge.tiers import REPLAY, STATISTICAL, TIER_ORDER
from harness.run.plan import RunPlan
from harness.run.rundir import default_run_dir
from harness.run.runtime.launch import choose_runtime, train_stage

if TYPE_CHECKING:
    from harness.judge.compare import Needs

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
    add_simulate_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("--out", type=Path, help="run directory (default: runs/<recipe>-<profile>-<utc time>/)")
    p.add_argument("--baseline", type=Path, help="baseline file (default: baselines/<recipe>/<profile>-<scale>.json)")
    p.add_argument("--tier", choices=TIER_ORDER,
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
    from harness.judge.baseline import load_baseline, reference_path
    from harness.run import environment

    forced = getattr(args, "tier", None)
    path = args.baseline or reference_path(res.name, res.profile_name, res.scale, res.hardware.reference_profile)
    if forced == REPLAY.name:
        if not path.is_file():
            raise HarnessError("no baseline to replay", file=str(path),
                               fix="record one (`harness record-baseline`) or name it with --baseline")
        if runtime not in ("local", "torchrun"):
            raise HarnessError(f"a replay runs on this machine, not with --runtime {runtime}", key_path="--runtime",
                               fix="use --runtime local (or torchrun)")
        return path
    if forced is not None or args.stage == "train" or runtime not in ("local", "torchrun") or not path.is_file() \
            or getattr(args, "resume", None) is not None:
        return None
    baseline = load_baseline(path)
    if not baseline.replay or baseline.environment is None or res.spec.seed != baseline.primary_seed:
        return None
    t = res.spec.trainer
    world = t.nnodes * t.n_gpus_per_node if runtime == "torchrun" else 1
    live = environment.live_summary(res, "torchrun" if runtime == "torchrun" else "local", world)
    blocking = [environment.change_text(c) for c in environment.changes(live, baseline.environment)
                if c.blocks_exact]
    if not blocking:
        return None
    sys.stderr.write(f"notice: this machine cannot reproduce the baseline bitwise ({'; '.join(blocking)}): "
                     f"replaying its recorded rollouts instead (--tier {REPLAY.name})\n")
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


def build_plan(args: argparse.Namespace) -> RunPlan:
    """The run asked for, decided once from the command line (nothing has started yet)."""
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
    sets = list(args.overrides)
    if args.resume is not None:  # the original run's --set overrides first, then the ones given now
        sets = resume_overrides(run_dir, args.overrides)
        res = resolve_args(args, sets)
    # the plan replaces the memory estimate; a simulated run has no device to plan for (`harness plan` plans it)
    asked = as_asked(args, res)  # --simulate / --nnodes checked first
    simulate = asked.simulation is not None
    planned = args.stage == "all" and res.hardware.device_type != "cpu" and not simulate
    preflight(res, skip=("memory-preflight",) if planned or simulate else ())  # the profile's own rules
    memory_plan = plan_before_run(res) if planned else None
    res = asked
    if res.simulation is not None:
        runtime, image = simulated_runtime(args.runtime, res)
    elif args.stage == "train":
        runtime, image = ("torchrun", None) if args.runtime == "torchrun" else ("local", None)
    else:
        runtime, image = choose_runtime(args.runtime, res, args.image)
    if args.resume is not None:
        check_resume(args, res, run_dir, runtime)
        if getattr(args, "auto_resumed", False):
            sys.stderr.write(f"notice: continuing the unfinished run in {run_dir} (trainer.resume_mode auto)\n")
    return RunPlan(recipe=args.recipe, res=res, run_dir=run_dir, runtime=runtime, image=image, steps=args.steps,
                   overrides=tuple(args.overrides), quiet=args.quiet, resume=args.resume,
                   nproc_per_node=args.nproc_per_node, replay=plan_replay(args, res, runtime), tier=args.tier,
                   baseline=args.baseline, candidates=getattr(args, "candidates", None),
                   probe=not getattr(args, "no_replay_probe", False), report=not getattr(args, "no_report", False),
                   train_only=args.stage == "train", memory_plan=memory_plan, simulated=res.simulation is not None)


def simulated_runtime(requested: str, res: Resolved) -> tuple[str, None]:
    """A simulated run's ranks are processes on this machine: torchrun (one process: local), never a container."""
    if requested == "docker":
        raise HarnessError("--simulate runs the ranks as processes on this machine, not in a container",
                           key_path="--runtime", fix="drop --runtime docker (or --simulate)")
    return ("torchrun" if res.simulation and res.simulation["world_size"] > 1 else "local", None)


def plan_before_run(res: Resolved) -> dict[str, Any]:
    """On an accelerator profile, before any process or container starts: the machine must have the profile's
    device kind and count (a one-line refusal, exit 2, naming both), and the step traced by ``harness plan`` must
    fit the device (else exit 1 with the largest consumer and a fix). Returns the plan. The caller plans no run on
    the cpu profile (its budget is the host's memory: ``harness plan`` plans it on request). On accelerator
    profiles the plan replaces the analytic ``memory-preflight`` rule, which estimates a verl deployment (its vLLM
    reservation) for ``validate`` and ``lint-verl``."""
    from harness.config.profiles import probe_machine

    hw = res.hardware
    machine = probe_machine()
    per_node = int(res.spec.trainer.n_gpus_per_node)
    if machine.device_type != hw.device_type or machine.device_count < per_node:
        raise HarnessError(f"profile {res.profile_name} needs {per_node} {hw.device_type} device(s) per node; this "
                           f"machine has {machine.device_count} {machine.device_type} ({machine.device_model})",
                           key_path="--profile", fix=f"run it on a {hw.accelerator.model} node, pick this machine's "
                           f"profile, or see what it would need: `harness plan {res.name} --profile "
                           f"{res.profile_name} --scale {res.scale}`")
    from harness.plan.estimate import make_plan

    doc = make_plan(res)
    if not doc["fits"]:
        raise HarnessError(f"one step needs {doc['per_rank_peak_bytes'] / 1e9:.2f} GB per rank in the "
                           f"{doc['peak_phase']} phase > {doc['budget_bytes'] / 1e9:.2f} GB usable (largest consumer: "
                           f"{doc['largest_consumer']}; traced by `harness plan`)", key_path="--profile",
                           fix=doc["fix"], exit_code=EXIT_FINDINGS)
    return doc


def execute(args: argparse.Namespace) -> int:
    plan = build_plan(args)
    try:
        train_stage(plan)
    finally:
        if plan.memory_plan is not None and plan.run_dir.is_dir():
            from harness.plan.estimate import write_plan

            write_plan(plan.memory_plan, plan.run_dir)
    if plan.train_only:
        return EXIT_OK
    return judge_and_report(plan)


MAX_CANDIDATES = 9
LEFTOVER_FIX = ("remove it; `harness compare RUN_DIR` then judges the run without it (with a notice), and "
                "`harness run` trains it when the run is repeated")


def _fresh(where: Path, what: str) -> None:
    """A directory the judge asked for must not exist yet: nothing there is overwritten."""
    if where.exists() or where.is_symlink():
        raise HarnessError(f"holds something that is not a finished {what} of this run", file=str(where),
                           fix=LEFTOVER_FIX)


def train_needs(plan: RunPlan, needs: Needs) -> None:
    """Train what the judge asked for: the candidate runs (other seeds, :mod:`harness.judge.candidates`) and the
    replay probe (:mod:`harness.judge.probe`), each from ``plan`` with other overrides into its own directory."""
    from harness.judge import candidates, probe

    for i, seed in enumerate(needs.candidate_seeds, 1):
        where = candidates.candidate_dir(plan.run_dir, seed)
        _fresh(where, "candidate run")
        if not plan.quiet:
            sys.stderr.write(f"notice: the {STATISTICAL.name} tier judges the median of several runs: training "
                             f"candidate seed {seed} ({i} of {len(needs.candidate_seeds)}) into {where}\n")
        where.parent.mkdir(parents=True, exist_ok=True)
        train_stage(plan.variant([*plan.without_seed(), f"seed={seed}"], where))
    want = needs.probe
    if want is not None:
        where = probe.probe_dir(plan.run_dir)
        _fresh(where, "replay probe")
        if not plan.quiet:
            sys.stderr.write(f"notice: the {STATISTICAL.name} tier also replays the baseline's first {want.steps} "
                             f"steps with this run's settings (a replay probe) into {where}\n")
        sets = plan.without_seed()  # a replay starts from the baseline's policy: the baseline's seed
        if plan.variant(sets, where).res.config["seed"] != want.primary_seed:
            sets.append(f"seed={want.primary_seed}")
        train_stage(plan.variant(sets, where, steps=want.steps, replay=want.baseline))


def judge_and_report(plan: RunPlan) -> int:
    """Judge the run and write its verdict (and report). When the judge needs more (the statistical tier's
    candidates and replay probe), train that first and judge again with them."""
    from harness.judge.compare import Needs, exit_code, judge_needs, write_verdict

    baseline = plan.baseline or plan.replay
    verdict, needs = judge_needs(plan.run_dir, baseline, plan.tier, plan.candidates)
    wanted = Needs(needs.candidate_seeds, needs.probe if plan.probe else None)
    if wanted and verdict.status in ("pass", "fail"):
        train_needs(plan, wanted)
        verdict, _ = judge_needs(plan.run_dir, baseline, plan.tier, plan.candidates)
    write_verdict(plan.run_dir, verdict)
    if plan.report:
        from harness.judge.report import write_run_report

        write_run_report(plan.run_dir, verdict)
    print(verdict.summary_line)
    if not plan.quiet:
        print(f"run directory: {plan.run_dir}")
    return exit_code(verdict)
