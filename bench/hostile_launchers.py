"""Hostile launchers through ``lint-verl`` and ``import-verl``: the acceptance check of the bash parser's guards.

    python bench/hostile_launchers.py [--n 1000] [--sample 40] [--crash-demo 12] [--seed 0]

1. ``--n`` random launchers (a context from ``{``, ``$``, ``(``, ``${``, ``{1..``, ``$(``, then one to three
   random code points of every plane, then an ending) and the tree-sitter-bash reducer ``{\\U000CB100 x``,
   each through both commands in the fuzz driver (``tests/fuzz/driver.py``: one interpreter, the command line's
   ``main`` per input): exit 0, 1 or 2, exactly one stderr line for 2, no traceback, no signal, under 5 s each.
2. ``--sample`` of them through a real ``python -m harness`` each (start-up included): the same checks, timed.
3. ``--crash-demo``: the reducer through ``lint-verl`` in fresh interpreters with the character pre-check switched
   off (patched in that process only), so tree-sitter really crashes in about one of three: the command must
   still answer one line, exit 2 (``the bash parser crashed (signal 11)``).

Prints the counts and the largest times; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
from fuzzlib import ENV, Driver  # noqa: E402

LIMIT_S = 5.0
CONTEXTS = ["{", "$", "(", "${", "{1..", "$("]
ENDINGS = [" x\n", "}\n", ")\n", "\n", "", " trainer.nnodes=1\n"]
REDUCER = "{\U000CB100 x\n"
NO_PRECHECK = ("import sys; import harness.verl.bashtree as t, harness.verl.lint as l; "
               "t.first_refused = l.first_refused = lambda text: None; "
               "from harness.cli import main; raise SystemExit(main(sys.argv[1:]))")


def code_point(rng: random.Random) -> str:
    plane = rng.choice(["ascii", "bmp", "astral", "high"])
    lo, hi = {"ascii": (0x20, 0x7E), "bmp": (0x80, 0xFFFF), "astral": (0x10000, 0x3FFFF),
              "high": (0x40000, 0x10FFFF)}[plane]
    cp = rng.randint(lo, hi)
    return chr(cp) if not 0xD800 <= cp <= 0xDFFF else "\ufffd"


def launchers(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = [REDUCER]
    for _ in range(n):
        body = "".join(code_point(rng) for _ in range(rng.randint(1, 3)))
        text = rng.choice(CONTEXTS) + body + rng.choice(ENDINGS)
        if rng.random() < 0.3:
            text = "python3 -m verl.trainer.main_ppo trainer.nnodes=1 \\\n  " + text
        out.append(text)
    return out


def problem(rc: int | None, stderr: str, seconds: float, signal: int | None = None, traceback: bool = False) -> str:
    if signal is not None:
        return f"signal {signal}"
    if traceback or "Traceback" in stderr:
        return "traceback"
    if rc not in (0, 1, 2):
        return f"exit {rc}"
    if rc == 2 and len(stderr.splitlines()) != 1:
        return f"{len(stderr.splitlines())} stderr lines"
    if seconds >= LIMIT_S:
        return f"{seconds:.1f} s"
    return ""


def argv(command: str, script: Path, tmp: Path) -> list[str]:
    extra = ["--out", str(tmp / "imported.json"), "--force"] if command == "import-verl" else []
    return [command, str(script), *extra]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--crash-demo", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    texts = launchers(args.n, args.seed)
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        script = tmp / "launcher.sh"
        driver = Driver(tmp)
        codes: Counter[tuple[str, int | None]] = Counter()
        worst = 0.0
        for k, text in enumerate(texts):
            script.write_bytes(text.encode("utf-8"))
            for command in ("lint-verl", "import-verl"):
                r = driver.run({"cli": argv(command, script, tmp)})
                codes[(command, r.rc)] += 1
                worst = max(worst, r.seconds)
                why = "still running" if r.timed_out else problem(r.rc, r.stderr, r.seconds, r.signal, r.traceback)
                if why:
                    failures.append(f"{command} #{k} {text!r}: {why}")
        driver.close()
        print(f"in one interpreter: {len(texts)} launchers x 2 commands, exit codes {dict(sorted(codes.items()))}, "
              f"slowest {worst:.2f} s")
        rng = random.Random(args.seed + 1)
        worst = 0.0
        for k, text in enumerate([REDUCER, *rng.sample(texts, min(args.sample, len(texts)))]):
            script.write_bytes(text.encode("utf-8"))
            for command in ("lint-verl", "import-verl"):
                t0 = time.monotonic()
                p = subprocess.run([sys.executable, "-m", "harness", *argv(command, script, tmp)], cwd=tmp, env=ENV,
                                   capture_output=True, text=True, timeout=60)
                took = time.monotonic() - t0
                worst = max(worst, took)
                why = problem(p.returncode, p.stderr, took, -p.returncode if p.returncode < 0 else None)
                if why:
                    failures.append(f"python -m harness {command} {text!r}: {why}")
        print(f"python -m harness, one process each: {args.sample + 1} launchers x 2 commands, slowest {worst:.2f} s")
        script.write_bytes(REDUCER.encode("utf-8"))
        seen: Counter[str] = Counter()
        for _ in range(args.crash_demo):
            p = subprocess.run([sys.executable, "-c", NO_PRECHECK, "lint-verl", str(script)], cwd=tmp, env=ENV,
                               capture_output=True, text=True, timeout=60)
            first = p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""
            seen["crashed (signal 11)" if "crashed (signal 11)" in first else
                 "crashed (signal 7)" if "crashed (signal 7)" in first else f"exit {p.returncode}"] += 1
            why = problem(p.returncode, p.stderr, 0.0, -p.returncode if p.returncode < 0 else None)
            if why:
                failures.append(f"pre-check off, reducer: {why}: {p.stderr[-300:]}")
        if args.crash_demo:
            print(f"pre-check off, reducer through lint-verl in {args.crash_demo} fresh interpreters: "
                  f"{json.dumps(dict(seen))}")
    for line in failures[:20]:
        print("FAIL", line)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
