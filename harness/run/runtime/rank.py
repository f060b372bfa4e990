"""Entry point of one torchrun rank: ``python -m harness.run.runtime.rank RECIPE --profile P ...``.

Started by :mod:`harness.run.runtime.torchrun`; not meant to be run by hand. Joins the job, shards
the models with FSDP2 and runs :func:`harness.run.runner.train` as this rank (rank 0 writes the run
record). A failure is recorded by torchelastic's error file, so the launcher can name the rank.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from harness.config.recipe import Resolved, resolve
from harness.errors import HarnessError


def cpu_world(res: Resolved, nproc: int) -> Resolved:
    """On the cpu profile, processes stand in for devices: record the process count as an override."""
    if res.hardware.device_type != "cpu" or nproc == res.spec.trainer.n_gpus_per_node:
        return res
    cfg = dict(res.config)
    cfg["trainer"] = {**cfg["trainer"], "n_gpus_per_node": nproc}
    note = {"key": "trainer.n_gpus_per_node", "value": nproc, "source": "--nproc-per-node (cpu processes)"}
    return replace(res, config=cfg, overrides=[*res.overrides, note])


def parser() -> argparse.ArgumentParser:
    """A rank's arguments (built by :meth:`harness.run.runtime.run_args.RunSpec.rank_args`)."""
    p = argparse.ArgumentParser(prog="harness.run.runtime.rank")
    p.add_argument("recipe")
    p.add_argument("--profile", required=True)
    p.add_argument("--scale", required=True)
    p.add_argument("--steps", type=int)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (harness.run.resume)")
    p.add_argument("--replay", type=Path, help="train on this baseline's recorded rollouts (harness.core.replay)")
    p.add_argument("--simulate", action="store_true", help="the profile's layout on CPU ranks (harness.run.simulate)")
    p.add_argument("--nnodes", type=int, help="nodes simulated")
    return p


def name_process(rank: str) -> None:
    """``harness-rank-N`` as this process's name (``ps``, ``top``, ``pgrep harness-rank-5``): a rank forked by
    :mod:`harness.run.runtime.zygote` keeps the zygote's command line."""
    from harness.run.runtime.prctl import set_name

    set_name(f"harness-rank-{rank}")


@record
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    name_process(os.environ.get("RANK", "?"))
    from harness.core.parallel import distributed, shutdown
    from harness.run.checkpoint import Interrupted
    from harness.run.resume import resume_overrides
    from harness.run.runner import train
    from harness.run.simulate import simulated

    nproc = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    sets = resume_overrides(args.out, args.overrides) if args.resume else args.overrides
    res = resolve(args.recipe, args.profile, args.scale, tuple(sets))
    res = simulated(res, args.nnodes) if args.simulate else cpu_world(res, nproc)
    dist = distributed(res.spec, res.hardware.collective_backend)
    try:
        train(res, args.out, steps=args.steps, runtime="torchrun", progress=not args.quiet, dist=dist,
              local_rank=int(os.environ.get("LOCAL_RANK", "0")), resume=args.overrides if args.resume else None,
              replay=args.replay)
        dist.all_gather_objects(None)  # every rank done (rank 0 writes the record last) before gloo is torn down
    except Interrupted as err:
        return err.exit_code  # checkpoint saved and the run marked interrupted; the launcher reports it
    except HarnessError as err:
        sys.stderr.write(f"error: rank {dist.rank}: {err.one_line()}\n")
        raise
    finally:
        shutdown()
    return 0


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown: the run is recorded and the process group destroyed, but with
    8 or more gloo ranks on one machine a C++ destructor at exit aborted now and then ("terminate called without
    an active exception", measured: 1 run in 3), turning a finished run into a failed rank."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main() or 0)
