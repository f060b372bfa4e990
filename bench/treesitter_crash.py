"""Which characters crash tree-sitter-bash: the experiment behind harness/verl/bashchars.py.

    python bench/treesitter_crash.py [--parents 6] [--bmp 1500] [--astral 1500]

Each parent is a fresh interpreter (its own address layout: whether an out-of-bounds read faults depends on
it) that forks one child per input and records the children killed by a signal. Inputs: random code points
(``--bmp`` below U+10000 from U+0080, ``--astral`` above) placed after ``{``, ``$``, ``(``, ``a{``, ``{1..``,
in double and single quotes, in a comment and alone. The raw parser is called: the harness's pre-check is
not in the way.

Measured with tree-sitter 0.26.1, tree-sitter-bash 0.25.1, Python 3.11.7, glibc, LANG=C.UTF-8 (six parents,
3,009 code points each, nine contexts): two parents of six crashed, on 1,132 and 1,147 code points, only in the
contexts ``{X``, ``a{X`` and ``{1..X}`` (SIGSEGV, a few SIGBUS), only from U+2C7E5 up (unassigned 5,658, private
use 1,149, CJK ideographs of Extension E/F 30); none in quotes, comments, after ``$`` or ``(``. Under LC_ALL=C
(libc's own class table) ten parents of ten crashed on nothing. The cause: ``src/scanner.c`` (``brace_start``)
calls ``isdigit(lexer->lookahead)`` with a code point; glibc's ``isdigit`` indexes the locale's class table with
it, which is defined only for -1..255. ``bench/treesitter_isdigit.c`` reproduces it without Python (deterministic
under LC_ALL=C there).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import unicodedata

CONTEXTS = {"brace": "{%s x\n", "dollar": "$%s\n", "paren": "(%s)\n", "dq": 'echo "{%s"\n', "sq": "echo '{%s'\n",
            "comment": "# {%s\n", "word{": "echo a{%s\n", "range": "echo {1..%s}\n", "alone": "%s\n"}


def parent(seed: int, n_bmp: int, n_astral: int) -> dict:
    """Run in a fresh interpreter: fork a child per (code point, context), return the crashes."""
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    lang = Language(tree_sitter_bash.language())
    rng = random.Random(seed)
    cps = [rng.randrange(0x80, 0x10000) for _ in range(n_bmp)] + \
          [rng.randrange(0x10000, 0x110000) for _ in range(n_astral)] + [0xCB100, 0x1F600, 0x20000, 0x10FFFF]
    crashes = []
    for cp in cps:
        for name, template in CONTEXTS.items():
            data = (template % chr(cp)).encode("utf-8", "surrogatepass")
            pid = os.fork()
            if pid == 0:
                signal.alarm(5)
                Parser(lang).parse(data)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            if os.WIFSIGNALED(status):
                crashes.append([cp, name, os.WTERMSIG(status)])
    return {"seed": seed, "tested": len(cps), "crashes": crashes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parents", type=int, default=6)
    ap.add_argument("--bmp", type=int, default=1500)
    ap.add_argument("--astral", type=int, default=1500)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a parent's own run (the seed)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(parent(args.one, args.bmp, args.astral)))
        return 0
    every = []
    for seed in range(args.parents):
        out = subprocess.run([sys.executable, __file__, "--one", str(seed), "--bmp", str(args.bmp), "--astral",
                              str(args.astral)], capture_output=True, text=True, check=True).stdout
        result = json.loads(out)
        crashes = result["crashes"]
        every += crashes
        low = min((c[0] for c in crashes), default=None)
        print(f"parent {seed}: {len(crashes)} crashing inputs of {result['tested'] * len(CONTEXTS)}"
              + (f", contexts {dict(collections.Counter(c[1] for c in crashes))}, lowest U+{low:04X}" if crashes else ""))
    cats = collections.Counter(unicodedata.category(chr(c[0])) for c in every)
    print(f"categories of the crashing code points: {dict(cats)}; signals {dict(collections.Counter(c[2] for c in every))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
