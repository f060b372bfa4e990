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
    return p


@record
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from harness.core.parallel import distributed, shutdown
    from harness.run.checkpoint import Interrupted
    from harness.run.resume import resume_overrides
    from harness.run.runner import train

    nproc = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    sets = resume_overrides(args.out, args.overrides) if args.resume else args.overrides
    res = cpu_world(resolve(args.recipe, args.profile, args.scale, tuple(sets)), nproc)
    dist = distributed(res.spec, res.hardware.collective_backend)
    try:
        train(res, args.out, steps=args.steps, runtime="torchrun", progress=not args.quiet, dist=dist,
              local_rank=int(os.environ.get("LOCAL_RANK", "0")), resume=args.overrides if args.resume else None)
    except Interrupted as err:
        return err.exit_code  # checkpoint saved and the run marked interrupted; the launcher reports it
    except HarnessError as err:
        sys.stderr.write(f"error: rank {dist.rank}: {err.one_line()}\n")
        raise
    finally:
        shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
