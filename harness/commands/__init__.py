"""One module per subcommand (HELP, add_arguments, execute); the arguments several share are here."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from harness.config.recipe import SCALES_DEFAULT, Resolved


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """RECIPE, --profile and --scale: what to run, and on which profile and scale."""
    p.add_argument("recipe", metavar="RECIPE", help="recipe name (recipes/NAME.json) or path to a recipe file")
    p.add_argument("--profile", help="hardware profile (default: the one matching this machine)")
    p.add_argument("--scale", default=SCALES_DEFAULT, help="recipe scale (default: smoke)")


def add_override_argument(p: argparse.ArgumentParser, applies_to: str = "") -> None:
    """--set KEY=VALUE (repeatable), checked against the schema's allowlist when resolved."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override an allowlisted key (repeatable){applies_to}; see `harness validate "
                        "--list-overrides`")


def steps_count(minimum: int = 1) -> Callable[[str], int]:
    """An argparse ``type`` for a step count: an integer from ``minimum`` to the schema's bound on
    ``trainer.total_training_steps`` (:func:`harness.config.recipe.steps_maximum`); else argparse's one-line
    usage error (exit 2)."""

    def parse(text: str) -> int:
        from harness.config.recipe import steps_maximum

        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        top = steps_maximum()
        if not minimum <= n <= top:
            raise argparse.ArgumentTypeError(f"must be {minimum}..{top} (the bound on trainer.total_training_steps), "
                                             f"got {n}")
        return n

    return parse


def chosen_profile(args: argparse.Namespace) -> str:
    """--profile, else the shipped profile that fits the live machine."""
    if args.profile is not None:
        return str(args.profile)
    from harness.config.profiles import live_profile_name

    return live_profile_name()


def add_simulate_arguments(p: argparse.ArgumentParser) -> None:
    """--simulate and --nnodes: an accelerator profile's layout as CPU processes (:mod:`harness.run.simulate`)."""
    p.add_argument("--simulate", action="store_true", help="run the accelerator profile's layout (nnodes x devices "
                   "per node ranks, its sharding and batch sizes) as CPU processes on this machine (gloo); the "
                   "manifest says simulated: true and lists what the CPU ran instead (harness/run/simulate.py)")
    p.add_argument("--nnodes", type=int, help="with --simulate: simulate this many nodes of the profile, one torchrun "
                   "launcher each on this machine (default: the scale's trainer.nnodes)")


def as_asked(args: argparse.Namespace, res: Resolved) -> Resolved:
    """``res`` simulated on CPU ranks with ``--simulate`` (:mod:`harness.run.simulate`), else as resolved."""
    from harness.errors import HarnessError

    if getattr(args, "simulate", False):
        from harness.run.simulate import simulated

        return simulated(res, args.nnodes)
    if getattr(args, "nnodes", None) is not None:
        raise HarnessError("--nnodes only applies with --simulate (a real run takes its nodes from the recipe's "
                           "profile settings)", key_path="--nnodes", fix="add --simulate, or drop --nnodes")
    return res
