"""Sessions: validate · lint · typecheck · tests · integration · fuzz · run-recipe · record-baseline · gate · build-image · certify · lint-verl.

Every session installs the project (editable) with the exact versions of ``constraints.txt`` on
nox's default virtualenv/pip backend (pip finds the local CPU torch wheel; uv would not).
Virtualenvs are reused, and so is an install while constraints.txt and pyproject.toml are unchanged (a stamp in the
virtualenv); ``nox -R`` skips the install step altogether, ``rm -rf .nox`` starts afresh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["validate", "lint", "tests", "integration"]  # tests runs mypy beside the unit tests
nox.options.default_venv_backend = "virtualenv"

PYTHON = None  # the interpreter nox runs on
LINT_PIN = "ruff==0.17.6"
TYPECHECK_PIN = "mypy==1.19.1"


def _install(session: nox.Session, extras: str = "", *pins: str) -> None:
    """The project (editable) with the pinned dependencies of constraints.txt, then ``pins`` (tools kept out of the
    run's lock: mypy), each its own ``pip install``."""
    _install_once(session, ("-c", "constraints.txt", f"-e.{extras}"), *((pin,) for pin in pins))


def _install_once(session: nox.Session, *installs: tuple[str, ...]) -> None:
    """``pip install`` each of ``installs``, unless this virtualenv already holds them: a stamp in it records the
    SHA-256 of constraints.txt, pyproject.toml and the install arguments (pip's no-op re-install took 4.7 s a
    session). Code changes need no re-install (editable); ``rm -rf .nox`` forces one."""
    location = getattr(session.virtualenv, "location", None)
    stamp = os.path.join(location, ".harness-install") if location else None
    digest = hashlib.sha256(b"".join(Path(f).read_bytes() for f in ("constraints.txt", "pyproject.toml"))
                            + repr(installs).encode()).hexdigest()
    if stamp and os.path.isfile(stamp) and Path(stamp).read_text() == digest:
        return
    for args in installs:
        session.install(*args)
    if stamp and not getattr(_global_config(session), "no_install", False):  # under `nox -R` nothing was installed
        Path(stamp).write_text(digest)


def _global_config(session: nox.Session) -> object:
    """nox's command-line options (``--no-install``, ``--install-only``), or None where nox keeps them elsewhere."""
    return getattr(getattr(session, "_runner", None), "global_config", None)


def _harness(session: nox.Session, *args: str, usage: str | None = None) -> None:
    if usage and not args:
        session.error(usage)
    _install(session)
    session.run("harness", *args, external=False)


@nox.session(python=PYTHON)
def validate(session: nox.Session) -> None:
    """Schema + safety checks of every recipe × profile (or the given paths)."""
    _harness(session, "validate", *session.posargs)


# Two pytest-xdist workers: the smallest supported runner has two cores, and a run's second thread adds little (a
# 5-step CPU smoke run: 11.1 s with two threads, 11.9 s with one; two such runs side by side: 14 s each).
# tests/conftest.py makes OpenMP wait passively (spinning, the two side by side took 25.6 s each), shares one
# warm-start cache between the workers, and keeps the pinned thread count, so no result changes.
WORKERS = ("-n", "2")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests: pure functions, schemas, rules, synthetic series; no training run (args pass through). Without
    args, mypy (the `typecheck` session's check) runs beside them: it keeps one core busy for ~25 s, which the two
    workers leave free at times (one after the other 99 s, side by side 86 s on 2 cores)."""
    _install(session, "[test]", TYPECHECK_PIN)
    if session.posargs or getattr(_global_config(session), "install_only", False):  # --install-only: no mypy either
        session.run("pytest", *session.posargs, success_codes=[0])
        return
    mypy = subprocess.Popen([os.path.join(session.bin, "mypy")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        session.run("pytest", "tests/unit", "-q", "--durations=10", *WORKERS, success_codes=[0])
    except BaseException:
        mypy.kill()
        mypy.wait()
        raise
    out = mypy.communicate()[0]
    session.log(f"mypy (beside the unit tests): {out.strip()}")
    if mypy.returncode:
        session.error("mypy found type errors (above)")


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """End to end: smoke runs, baselines, resume, torchrun, containers, certificates, a fuzz slice (args pass through).

    The fuzz slice: tests/fuzz with HARNESS_FUZZ_EXAMPLES unset (20 examples per entry point) and every saved input.
    """
    _install(session, "[test]")
    # --durations: every CI log says where its minutes go. One test file per worker at a time (--dist loadfile):
    # a file's session-scoped runs (a recorded baseline, a gate) are made once, on the worker that runs the file; the
    # files in tests/integration/conftest.py's order (the costliest first), not xdist's (by number of tests).
    # Then the tests that need the machine to themselves (a throughput verdict), on one worker.
    if session.posargs:
        session.run("pytest", *session.posargs, success_codes=[0])
        return
    # Both passes share one warm-start cache (tests/conftest.py): the serial pass's run does not train again a warm
    # start the parallel pass made (16 s on two cores). A fresh directory, removed afterwards.
    cache = tempfile.mkdtemp(prefix="harness-test-cache-")
    try:
        session.run("pytest", "tests/integration", "tests/fuzz", "-q", "--durations=25", "-m", "not serial",
                    *WORKERS, "--dist", "loadfile", "--no-loadscope-reorder", success_codes=[0],
                    env={"HARNESS_TEST_CACHE": cache})
        session.run("pytest", "tests/integration", "-q", "--durations=5", "-m", "serial", success_codes=[0],
                    env={"HARNESS_TEST_CACHE": cache})
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """Fuzz the entry points that read foreign files: HARNESS_FUZZ_EXAMPLES (default 300) per entry point.

    Each input runs in a child process; one that crashes, hangs, prints a traceback or exits other than 0/1/2 is
    saved in tests/fixtures/hostile/fuzz/ and fails the session (args pass through to pytest).
    """
    _install(session, "[test]")
    examples = os.environ.get("HARNESS_FUZZ_EXAMPLES", "300")
    session.run("pytest", *(session.posargs or ["tests/fuzz", "-q", "--durations=10"]), success_codes=[0],
                env={"HARNESS_FUZZ_EXAMPLES": examples})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over the project (the rules in pyproject.toml: pyflakes and pycodestyle's errors)."""
    # pinned here, not in constraints.txt: that file is the run's software lock, which certificates bind
    _install_once(session, (LINT_PIN,))
    session.run("ruff", "check", "harness", "tests", "bench", "noxfile.py", *session.posargs)


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over the package, against the pinned torch / transformers / numpy (settings in pyproject.toml)."""
    _install(session, "", TYPECHECK_PIN)  # mypy beside the run's lock, like ruff
    session.run("mypy", *session.posargs)


@nox.session(name="run-recipe", python=PYTHON)
def run_recipe(session: nox.Session) -> None:
    """Run a recipe and judge it: nox -s run-recipe -- RECIPE [--profile P] [--scale S] [--steps N] [--set k=v]."""
    _harness(session, "run", *session.posargs,
             usage="Usage: nox -s run-recipe -- RECIPE [--profile P] [--scale S] [--steps N] [--set k=v] [--runtime R]")


@nox.session(name="record-baseline", python=PYTHON)
def record_baseline(session: nox.Session) -> None:
    """Record a baseline: nox -s record-baseline -- RECIPE --profile P --seeds 3 [--force]."""
    _harness(session, "record-baseline", *session.posargs,
             usage="Usage: nox -s record-baseline -- RECIPE --profile P --seeds N [--force]")


@nox.session(python=PYTHON)
def gate(session: nox.Session) -> None:
    """Every recipe at smoke scale on the live profile; JUnit XML + Markdown summary under runs/gate/."""
    _harness(session, "gate", *(session.posargs or ["--junit", "runs/gate/junit.xml",
                                                      "--summary", "runs/gate/summary.md"]))


@nox.session(name="build-image", python=PYTHON)
def build_image(session: nox.Session) -> None:
    """Build a pinned container image: nox -s build-image -- cpu|cuda|ascend."""
    _harness(session, "build-image", *session.posargs, usage="Usage: nox -s build-image -- cpu|cuda|ascend")


@nox.session(python=PYTHON)
def certify(session: nox.Session) -> None:
    """Certify this machine against a hardware profile: nox -s certify -- PROFILE --key KEY [--image REF]."""
    _harness(session, "certify", *session.posargs, usage="Usage: nox -s certify -- PROFILE --key KEY [--image REF]")


@nox.session(name="lint-verl", python=PYTHON)
def lint_verl(session: nox.Session) -> None:
    """Statically lint verl launcher scripts: nox -s lint-verl -- SCRIPT... [--profile P]."""
    _harness(session, "lint-verl", *session.posargs, usage="Usage: nox -s lint-verl -- SCRIPT... [--profile P]")
