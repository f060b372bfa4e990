"""`harness` command line: parse arguments, dispatch to one command module, map errors to exit codes.

Each command lives in ``harness/commands/<name>.py`` and exposes ``HELP`` (one line),
``add_arguments(parser)`` and ``execute(args) -> int``. Exit codes: 0 ok, 1 findings or
regression, 2 bad input or usage. A :class:`HarnessError` is printed as its one line, never
as a traceback; so is an :class:`OSError` no command turned into one (a read-only or full file system: exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from harness import __version__, numerics
from harness.errors import EXIT_USAGE, HarnessError, os_error
from harness.run.runtime.child import follow_parent

# command name -> module under harness.commands (kept in the order `--help` lists them)
COMMANDS: dict[str, str] = {
    "validate": "validate",
    "plan": "plan",
    "run": "run",
    "compare": "compare",
    "record-baseline": "record_baseline",
    "gate": "gate",
    "report": "report",
    "lint-verl": "lint_verl",
    "import-verl": "import_verl",
    "export-verl": "export_verl",
    "build-image": "build_image",
    "keygen": "keygen",
    "certify": "certify",
    "verify-certificate": "verify_certificate",
    "mlperf-check": "mlperf_check",
    "probe": "probe",
    "ckpt-resume": "ckpt_resume",
    "slurm": "slurm",
}


class _ArgParser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (fix: see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_USAGE)


def _load(module: str):
    return importlib.import_module(f"harness.commands.{module}")


def build_parser(available: dict[str, str] | None = None) -> argparse.ArgumentParser:
    parser = _ArgParser(prog="harness", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgParser)
    for name, module in (available or COMMANDS).items():
        try:
            mod = _load(module)
        except ModuleNotFoundError as err:
            if err.name == f"harness.commands.{module}":
                continue  # command not part of this build
            raise
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_execute=mod.execute)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    numerics.apply_env()  # before anything imports torch: the libraries read it when they initialise
    follow_parent()  # a run that record-baseline, the gate or ckpt-resume started stops when they die
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_execute", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args._execute(args))
    except HarnessError as err:
        sys.stderr.write(f"error: {err.one_line()}\n")
        return err.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except OSError as err:  # the last line of defence: a read-only or full disk, no permission, …
        sys.stderr.write(f"error: {os_error(err, doing='use the file').one_line()}\n")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
