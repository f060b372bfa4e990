"""The characters a launcher may hold before tree-sitter-bash reads it.

tree-sitter-bash 0.25.1 (with tree-sitter 0.26.1) reads past the end of a C library table on some
input and takes the whole process down (SIGSEGV or SIGBUS): its external scanner, looking for a brace
range ``{1..3}``, passes the code point after ``{`` (and after ``{N..``) to C's ``isdigit()``, which is
defined only for -1 and 0..255 and indexes the locale's class table with it (``src/scanner.c``, the two
``isdigit(lexer->lookahead)`` loops of ``brace_start``). Whether a code point crashes depends on the
locale and on where the library and the locale table were mapped: on Linux with ``C.UTF-8``, code
points from about U+2C000 up crash in about a third of fresh processes (planes 4 to 16: mostly
unassigned and private-use code points, and a few CJK ideographs of Extension E / F); below that the
read stays inside mapped memory and yields a meaningless answer.

So before a script reaches the parser, :func:`first_refused` finds, anywhere in the text (code,
quotes, comments, here-documents alike: the check does not depend on how bash would read the text):

- a control character other than tab, newline and carriage return (``Cc``: NUL, ESC, DEL, C1, ...);
- an unassigned (``Cn``, as of :data:`unicodedata.unidata_version`), private-use (``Co``) or surrogate
  (``Cs``) code point;
- a code point above U+00FF right after ``{`` or after ``{`` digits ``..`` digits (the input
  ``isdigit()`` is undefined for; this also covers the assigned ideographs above).

Refusing them anywhere is safe: a real launcher (commands, paths, Hydra overrides, comments in a human
language) holds none of them, and one that does gets one line naming the line, the column and the code
point, with the way out (write the character as a ``$'\\U...'`` escape, or drop it). A crash this check
does not foresee is still contained: the command line parses launchers in a child process
(:mod:`harness.verl.isolate`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

ALLOWED_CONTROLS = "\t\n\r"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_AFTER_BRACE = re.compile(r"\{[0-9]*(?:\.\.[0-9]*)?([^\x00-\xff])")
CATEGORY_NAMES = {"Cc": "a control character", "Cn": "an unassigned code point", "Co": "a private-use code point",
                  "Cs": "a surrogate code point"}


@dataclass(frozen=True)
class Refused:
    """A character the parser is not given: where it is and why."""

    pos: int  # offset into the text, in characters
    char: str
    why: str

    @property
    def code(self) -> str:
        return f"U+{ord(self.char):04X}"

    def where(self, text: str) -> tuple[int, int]:
        """(line, column), both 1-based, of the character in ``text``."""
        line = text.count("\n", 0, self.pos) + 1
        return line, self.pos - (text.rfind("\n", 0, self.pos) + 1) + 1

    def message(self, text: str) -> str:
        line, col = self.where(text)
        return f"line {line}:{col}: {self.code} is {self.why}"


FIX = "remove the character, or write it as an escape ($'\\U000XXXXX') where a value needs it"


def first_refused(text: str) -> Refused | None:
    """The first character of ``text`` the bash parser is not given, or None."""
    found: list[Refused] = []
    m = _CONTROL.search(text)
    if m:
        found.append(Refused(m.start(), m.group(), CATEGORY_NAMES["Cc"] + " (only tab, newline and carriage "
                                                    "return are accepted in a launcher)"))
    if not text.isascii():
        for m in _NON_ASCII.finditer(text):
            if found and m.start() > found[0].pos:
                break
            cat = unicodedata.category(m.group())
            if cat in ("Cn", "Co", "Cs"):
                extra = f" in Unicode {unicodedata.unidata_version}" if cat == "Cn" else ""
                found.append(Refused(m.start(), m.group(), f"{CATEGORY_NAMES[cat]}{extra}: no launcher holds one, "
                                     "and some crash the bash parser"))
                break
        m = _AFTER_BRACE.search(text)
        if m:
            found.append(Refused(m.start(1), m.group(1), "right after '{': the bash parser (tree-sitter-bash 0.25.1) "
                                 "passes it to C's isdigit(), which reads out of bounds and can crash"))
    return min(found, key=lambda r: r.pos) if found else None
