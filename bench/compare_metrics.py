"""Bitwise comparison of two runs' metrics.jsonl (timing and perf metrics aside).

    python bench/compare_metrics.py RUN_A RUN_B     -> "bitwise equal: N steps x M metrics" or the first differences
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(run: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: {k: v for k, v in r.items() if k != "step" and not k.startswith(("timing_s/", "perf/"))}
            for r in rows}


def main() -> int:
    a, b = load(Path(sys.argv[1])), load(Path(sys.argv[2]))
    diffs = []
    for step in sorted(set(a) | set(b)):
        ra, rb = a.get(step, {}), b.get(step, {})
        for key in sorted(set(ra) | set(rb)):
            x, y = ra.get(key), rb.get(key)
            if not (isinstance(x, float) and isinstance(y, float) and x.hex() == y.hex()) and x != y:
                diffs.append((step, key, x, y))
    if not diffs:
        print(f"bitwise equal: {len(a)} steps, {sum(len(r) for r in a.values())} values")
        return 0
    print(f"{len(diffs)} differences; first at step {diffs[0][0]}:")
    for step, key, x, y in diffs[:8]:
        print(f"  step {step} {key}: {x!r} vs {y!r}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
