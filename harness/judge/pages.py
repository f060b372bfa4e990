"""The HTML pages — a run's ``report.html``, a gate's ``report.html``, a certificate's ``certificate.html`` — from
Jinja2 templates (``templates/``) that share one stylesheet.

Every value is autoescaped (run directories, baselines and certificates are data, never markup), and a name a
template uses but the page does not supply is an error (``StrictUndefined``), not an empty cell. The templates
are the package's own files; nothing from a run directory is ever loaded as a template.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).with_name("templates")


def num(x: Any) -> str:
    """A number for a table cell: thousands separated above 1e4, six significant digits below, — for none."""
    if x is None:
        return "—"
    if isinstance(x, float):
        if not math.isfinite(x):
            return repr(x)
        return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:.6g}"
    return str(x)


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = num
    return env


def render(template: str, **context: Any) -> str:
    """``templates/<template>`` filled with ``context``."""
    return _environment().get_template(template).render(**context) + "\n"
