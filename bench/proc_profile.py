"""Where the test command's CPU goes, process by process.

``install VENV``: puts a ``.pth`` hook into the virtualenv's site-packages that appends one JSON line per Python
process at its exit to ``$HARNESS_PROC_LOG`` (default ``/tmp/proclog.jsonl``): argv, wall and CPU seconds,
whether torch / transformers were loaded, and the test that started it (``PYTEST_CURRENT_TEST``, which a
child inherits). Processes that end by a signal or ``os._exit`` (killed runs, some ranks)
are not logged. ``uninstall VENV`` removes it. ``summary LOG [--json OUT]``: CPU and wall seconds by program and
subcommand, and the costliest ``harness`` processes.

Used on a clone, never on a checkout whose tests are being judged::

    python3 bench/proc_profile.py install .nox/integration
    nox -R -s integration
    python3 bench/proc_profile.py summary /tmp/proclog.jsonl --json bench/results/<dir>/procs.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HOOK = '''import atexit, json, os, sys, time
_t0 = time.time()
def _log():
    try:
        t = os.times()
        line = json.dumps({"pid": os.getpid(), "end": round(time.time(), 2), "argv": sys.argv[:12], "wall": time.time() - _t0,
                           "cpu": t.user + t.system, "torch": "torch._C" in sys.modules,
                           "transformers": "transformers" in sys.modules,
                           "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]})
        with open(os.environ.get("HARNESS_PROC_LOG", "/tmp/proclog.jsonl"), "a") as f:
            f.write(line + "\\n")
    except Exception:
        pass
atexit.register(_log)
'''


def site_packages(venv: str) -> Path:
    found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if len(found) != 1:
        raise SystemExit(f"{venv}: no single lib/python3*/site-packages")
    return Path(found[0])


def install(venv: str) -> None:
    sp = site_packages(venv)
    (sp / "zz_proc_profile.py").write_text(HOOK)
    (sp / "zz_proc_profile.pth").write_text("import zz_proc_profile\n")
    print(f"hook installed in {sp}")


def uninstall(venv: str) -> None:
    sp = site_packages(venv)
    for name in ("zz_proc_profile.py", "zz_proc_profile.pth"):
        (sp / name).unlink(missing_ok=True)


def kind(argv: list[str]) -> str:
    prog = os.path.basename(argv[0]) if argv else "?"
    if prog == "__main__.py" and len(argv) > 1:  # python -m harness SUBCOMMAND
        return f"harness {argv[1]}"
    return f"{prog} {' '.join(argv[1:2])}".strip()


def summary(log: str, out: str | None) -> None:
    rows = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[kind(r["argv"])].append(r)
    table = sorted(({"kind": k, "n": len(v), "cpu_s": round(sum(r["cpu"] for r in v), 1),
                     "wall_s": round(sum(r["wall"] for r in v), 1),
                     "median_cpu_s": round(statistics.median(r["cpu"] for r in v), 2)} for k, v in by.items()),
                   key=lambda d: -d["cpu_s"])
    top = sorted((r for r in rows if kind(r["argv"]).startswith("harness ")), key=lambda r: -r["cpu"])[:25]
    tests: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("test") and not kind(r["argv"]).startswith("pytest"):
            tests[r["test"].split("[")[0]].append(r)
    per_test = sorted(({"test": t, "n": len(v), "cpu_s": round(sum(r["cpu"] for r in v), 1),
                        "with_torch": sum(bool(r.get("torch")) for r in v)} for t, v in tests.items()),
                      key=lambda d: -d["cpu_s"])
    doc = {"processes": len(rows), "cpu_s": round(sum(r["cpu"] for r in rows), 1),
           "with_torch": sum(bool(r.get("torch")) for r in rows), "by_kind": table, "by_test": per_test,
           "costliest": [{"cpu_s": round(r["cpu"], 1), "wall_s": round(r["wall"], 1),
                          "argv": [os.path.basename(a) if "/" in a else a for a in r["argv"][1:12]]} for r in top]}
    print(f"{doc['processes']} processes, {doc['cpu_s']} CPU-s, {doc['with_torch']} with torch loaded")
    for d in table[:20]:
        print(f"{d['n']:4d} {d['cpu_s']:8.1f} CPU-s {d['wall_s']:8.1f} wall-s  median {d['median_cpu_s']:6.2f}  "
              f"{d['kind']}")
    for d in per_test[:25]:
        print(f"{d['n']:4d} {d['cpu_s']:8.1f} CPU-s {d['with_torch']:3d} with torch  {d['test']}")
    if out:
        Path(out).write_text(json.dumps(doc, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("install", "uninstall"):
        sub.add_parser(name).add_argument("venv")
    s = sub.add_parser("summary")
    s.add_argument("log")
    s.add_argument("--json")
    a = ap.parse_args()
    if a.cmd == "install":
        install(a.venv)
    elif a.cmd == "uninstall":
        uninstall(a.venv)
    else:
        summary(a.log, a.json)


if __name__ == "__main__":
    sys.exit(main())
