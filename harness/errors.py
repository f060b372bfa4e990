"""Errors a user can act on: one line naming the file, the key path and the fix.

Every entry point catches :class:`HarnessError` and prints ``str(err)`` (never a traceback).
Exit codes follow the CLI contract: 0 ok, 1 findings / regression, 2 bad input or usage.
"""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


# characters that end or break a line, or drive a terminal: what one line of output or of a script must not hold
LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: object) -> str:
    """``text`` safe to print: every control or other non-printable character escaped as Python would write it
    (``\\n``, ``\\x1b``, ``\\u202e``), so a string read from a file can neither start a line of its own (a forged
    ``VERIFIED …``) nor drive the terminal (ANSI escapes). Printable text, non-ASCII included, is kept as it is."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


class HarnessError(Exception):
    """A user-facing error: ``file::key.path: message (fix: hint)``.

    ``exit_code`` is 2 (bad input) unless the error reports findings (1).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key_path: str | None = None,
        fix: str | None = None,
        exit_code: int = EXIT_USAGE,
    ) -> None:
        self.message = message
        self.file = file
        self.key_path = key_path
        self.fix = fix
        self.exit_code = exit_code
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.key_path:
                where += f"::{self.key_path}"
            where += ": "
        elif self.key_path:
            where = f"{self.key_path}: "
        text = f"{where}{self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return shown(" ".join(text.split()))  # always exactly one line, nothing that drives a terminal


def os_error(err: OSError, path: object = None, *, doing: str = "write") -> HarnessError:
    """An :class:`OSError` from the file system (a read-only or full disk, no permission) as one line naming
    the path (``path``: the file being written, rather than a temporary file the error names) and the errno text."""
    import errno

    where = path if path is not None else err.filename
    text = err.strerror or str(err) or type(err).__name__
    fix = {errno.ENOSPC: "free space on that file system, or write elsewhere",
           errno.EDQUOT: "free space in your quota, or write elsewhere",
           errno.EROFS: "choose a directory on a writable file system",
           errno.EACCES: "check the permissions, or choose another directory",
           errno.EPERM: "check the permissions, or choose another directory"}.get(err.errno or 0,
                                                                               "check the path and the file system")
    return HarnessError(f"cannot {doing} ({text})", file=None if where is None else str(where), fix=fix)
