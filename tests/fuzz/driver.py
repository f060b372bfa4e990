"""The child that runs fuzz inputs: one JSON request a line on stdin, one JSON reply a line on the protocol fd.

Started once (``python tests/fuzz/driver.py``: the harness is imported once, not per input) by
:mod:`fuzzlib`, which kills it when an input hangs and starts another when one kills it. Each request runs
one harness entry point the way ``python -m harness`` would: ``{"cli": [argv...]}`` calls ``harness.cli.main``
(a ``SystemExit`` gives its code; any other exception is what the real command line would print as a traceback);
``{"replay": BASELINE}`` calls the loader ``harness run --tier replay --baseline`` uses (the baseline, then its
checksummed rollouts archive, every step read) without training (``driver.py --once BASELINE`` does that for
one baseline, as a command would: the saved corpus runs it). The reply: exit code, whether a traceback
would have been printed, the ends of stdout and stderr, and the seconds taken.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import time
import traceback

MEMORY_BYTES = 6 << 30  # an input that needs more is a finding (MemoryError), not a machine out of memory


def replay(baseline: str) -> int:
    from pathlib import Path

    from harness.errors import HarnessError
    from harness.run.runner import open_replay

    try:
        source, _ = open_replay(Path(baseline))
        for step in range(1, source.steps + 1):
            source.step(step)
    except HarnessError as err:
        sys.stderr.write(f"error: {err.one_line()}\n")
        return err.exit_code
    return 0


def handle(req: dict) -> dict:
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    crashed = False
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(req["cli"]) if "cli" in req else replay(req["replay"])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - what `python -m harness` would print as a traceback, exit 1
            traceback.print_exc()
            rc, crashed = 1, True
    return {"rc": rc, "traceback": crashed or "Traceback (most recent call last)" in err.getvalue(),
            "stdout": out.getvalue()[-2000:], "stderr": err.getvalue()[-2000:], "seconds": time.monotonic() - t0}


def serve() -> None:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # native writes (and children) go nowhere; replies go to the channel only
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > MEMORY_BYTES:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, hard))
    import harness.cli  # noqa: F401 - imported once, before the first request is timed

    channel.write(json.dumps({"ready": True}) + "\n")
    channel.flush()
    for line in sys.stdin:
        reply = handle(json.loads(line))
        channel.write(json.dumps(reply) + "\n")
        channel.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--once"]:  # one baseline, its exit code and output as a command's (the saved corpus)
        raise SystemExit(replay(sys.argv[2]))
    serve()
