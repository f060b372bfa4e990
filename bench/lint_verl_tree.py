"""Lint every trainer launcher of a verl checkout and tabulate what comes out.

    python bench/lint_verl_tree.py VERL_DIR [--json OUT] [--timeout 20]

Launchers: every ``*.sh`` under ``examples/``, ``recipe/``, ``tests/special_e2e/`` and
``tests/special_npu/`` of VERL_DIR whose text names ``verl.trainer.main_ppo``. Each is linted in
a child process with a time limit (a hang counts as such, not as a stall of the whole run).
Prints the counts of refusals (HarnessError), tracebacks (any other exception) and hangs, then a
table of error findings by rule and message class (the message with quoted values, numbers and
key paths generalised), with one example file per class.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

ROOTS = ("examples", "recipe", "tests/special_e2e", "tests/special_npu")
MARK = "verl.trainer.main_ppo"


def launchers(verl: Path) -> list[Path]:
    found = []
    for root in ROOTS:
        for path in sorted((verl / root).rglob("*.sh")):
            if path.is_file() and MARK in path.read_text(encoding="utf-8", errors="replace"):
                found.append(path)
    return found


def lint_one(path: str) -> dict:
    from harness.errors import HarnessError
    from harness.verl.lint import lint_file

    try:
        result = lint_file(path)
    except HarnessError as err:
        return {"file": path, "status": "refused", "detail": err.one_line()}
    except Exception as err:  # noqa: BLE001 - counted, never raised
        return {"file": path, "status": "traceback", "detail": f"{type(err).__name__}: {err}"}
    return {"file": path, "status": "ok",
            "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message, "line": f.line}
                         for f in result.findings]}


def message_class(message: str) -> str:
    text = re.sub(r"'[^']*'", "'…'", message)
    text = re.sub(r"\b[\w-]+(\.[\w-]+){1,}\b", "<key>", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return text[:110]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verl", type=Path, help="a checkout (or archive) of verl's repository")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per launcher")
    args = parser.parse_args(argv)
    paths = launchers(args.verl)
    results = []
    with ProcessPoolExecutor(max_workers=1) as pool:
        for path in paths:
            future = pool.submit(lint_one, str(path))
            try:
                results.append(future.result(timeout=args.timeout))
            except FutureTimeout:
                results.append({"file": str(path), "status": "hang", "detail": f"over {args.timeout:.0f} s"})
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.kill()
                pool.shutdown(wait=False, cancel_futures=True)
                pool = ProcessPoolExecutor(max_workers=1)
    status = Counter(r["status"] for r in results)
    print(f"launchers: {len(paths)}  ok: {status['ok']}  refused: {status['refused']}  "
          f"tracebacks: {status['traceback']}  hangs: {status['hang']}")
    for r in results:
        if r["status"] != "ok":
            print(f"  {r['status']}: {r['file']}: {r['detail']}")
    classes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        for f in r.get("findings", []):
            if f["severity"] == "error":
                classes[(f["rule"], message_class(f["message"]))].append(f"{r['file']}:{f['line']}")
    print("\n| rule | message class | findings | files | example |\n|---|---|---|---|---|")
    for (rule, cls), where in sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        files = len({w.rsplit(":", 1)[0] for w in where})
        example = where[0].replace(str(args.verl) + "/", "")
        print(f"| {rule} | {cls} | {len(where)} | {files} | {example} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
