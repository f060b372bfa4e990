"""Hydra overrides of a verl trainer command, verl's known keys, and the merged config.

``key=value`` changes a key verl's config has (Hydra refuses a key that is not there),
``+key=value`` adds a key (refused when it is already there), ``++key=value`` sets it either way,
``~key`` deletes it. Values use Hydra's grammar (``null``, ``true``/``False``, numbers, quoted
strings, ``[a,b]``, ``{k: v}``); ``${...}`` stays an OmegaConf interpolation and is resolved after
merging, like OmegaConf would (``${oc.select:key,default}``, ``${key}``, ``${.sibling}``).

Known keys and defaults come from ``verl_keys.json`` (see :mod:`harness.verl.build_keys`); the
engine view is picked by the ``model_engine`` override (``dp``, the default, ``megatron``,
``torchtitan`` or ``veomni``) or by ``--config-name ppo_megatron_trainer``.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEYS_FILE = Path(__file__).with_name("verl_keys.json")
GROUPS = {"model_engine"}  # Hydra config groups selected on the command line
HYDRA_FLAGS = {"--config-path", "--config-name", "--config-dir", "-cp", "-cn", "-cd"}
MISSING = "???"


@functools.cache
def verl_keys() -> dict[str, Any]:
    with KEYS_FILE.open(encoding="utf-8") as fh:
        return json.load(fh)


def engines() -> tuple[str, ...]:
    """The engines whose defaults are shipped (``dp`` first): the values ``model_engine`` may take."""
    return tuple(verl_keys()["engines"])


@functools.cache
def engine_defaults(engine: str) -> dict[str, Any]:
    """dotted key -> default for one engine (``dp`` = FSDP, ``megatron``, ``torchtitan``, ``veomni``)."""
    data = verl_keys()
    has = data["engines_of"]
    out = {k: v for k, v in data["keys"].items() if k not in has or engine in has[k]}
    out.update(data["defaults"][engine])
    return out


@functools.cache
def _prefixes(engine: str) -> frozenset[str]:
    out: set[str] = set()
    for key in engine_defaults(engine):
        parts = key.split(".")
        out.update(".".join(parts[:k]) for k in range(1, len(parts)))
    return frozenset(out)


def known_key(key: str, engine: str) -> bool:
    """A key (leaf or section) verl's config has for ``engine``."""
    return key in engine_defaults(engine) or key in _prefixes(engine)


# ----------------------------------------------------------------------------- values
class _ValueParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def parse(self) -> Any:
        value = self.element(top=True)
        self.ws()
        if self.i != len(self.text):
            raise ValueError("trailing text")
        return value

    def ws(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def element(self, top: bool = False) -> Any:
        self.ws()
        if self.i >= len(self.text):
            return "" if top else None
        c = self.text[self.i]
        if c == "[":
            return self.seq("[", "]")
        if c == "{":
            return self.mapping()
        if c in "'\"":
            return self.quoted(c)
        return self.primitive(stop=set() if top else set(",]}:"))

    def seq(self, opening: str, closing: str) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.text.startswith(closing, self.i):
            self.i += 1
            return out
        while True:
            out.append(self.element())
            self.ws()
            if self.text.startswith(",", self.i):
                self.i += 1
                continue
            if self.text.startswith(closing, self.i):
                self.i += 1
                return out
            raise ValueError(f"expected ',' or '{closing}'")

    def mapping(self) -> dict[str, Any]:
        self.i += 1
        out: dict[str, Any] = {}
        self.ws()
        if self.text.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.ws()
            key = self.primitive(stop=set(":,}"), raw=True)
            self.ws()
            if not self.text.startswith(":", self.i):
                raise ValueError("expected ':' in a mapping")
            self.i += 1
            out[str(key).strip()] = self.element()
            self.ws()
            if self.text.startswith(",", self.i):
                self.i += 1
                continue
            if self.text.startswith("}", self.i):
                self.i += 1
                return out
            raise ValueError("expected ',' or '}'")

    def quoted(self, q: str) -> str:
        j = self.i + 1
        out: list[str] = []
        while j < len(self.text):
            c = self.text[j]
            if c == "\\" and j + 1 < len(self.text) and self.text[j + 1] in (q, "\\"):
                out.append(self.text[j + 1])
                j += 2
                continue
            if c == q:
                self.i = j + 1
                return "".join(out)
            out.append(c)
            j += 1
        raise ValueError("unterminated quote")

    def primitive(self, stop: set[str], raw: bool = False) -> Any:
        start = self.i
        depth = 0
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == "$" and self.text.startswith("${", self.i):
                depth += 1
                self.i += 2
                continue
            if c == "}" and depth:
                depth -= 1
            elif not depth and c in stop:
                break
            self.i += 1
        token = self.text[start:self.i].strip()
        return token if raw else scalar(token)


def scalar(token: str) -> Any:
    low = token.lower()
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(token)
    except ValueError:
        pass
    if any(ch.isdigit() for ch in token):
        try:
            value = float(token)
        except ValueError:
            return token
        if math.isfinite(value):
            return value
    return token


def parse_value(text: str) -> Any:
    """A Hydra override value as a Python value; text that does not parse stays a string."""
    try:
        return _ValueParser(text).parse()
    except (ValueError, IndexError, RecursionError):
        return text


def format_value(value: Any, top: bool = True) -> str:
    """The Hydra spelling of a value, such that :func:`parse_value` gives it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(format_value(v, top=False) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v, top=False)}" for k, v in value.items()) + "}"
    text = str(value)
    plain = text and not any(ch in text for ch in " \t\n,[]{}:'\"\\=()") and parse_value(text) == text
    if plain and not text.startswith(("+", "~")):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ----------------------------------------------------------------------------- overrides
@dataclass(frozen=True)
class LauncherOverride:
    raw: str
    prefix: str  # "" | "+" | "++" | "~"
    key: str
    value: Any
    value_text: str | None  # None for a delete without a value
    line: int
    unknown: tuple[Any, ...] = ()  # bashwords.Unknown items inside the text

    @property
    def is_group(self) -> bool:
        return self.key in GROUPS or "/" in self.key or "@" in self.key


def parse_override(raw: str, line: int, unknown: tuple[Any, ...] = ()) -> LauncherOverride | None:
    """``[+|++|~]key[=value]``; None when ``raw`` is not an override."""
    prefix = ""
    for p in ("++", "+", "~"):
        if raw.startswith(p):
            prefix = p
            break
    body = raw[len(prefix):]
    key, eq, value_text = body.partition("=")
    key = key.strip()
    if not key or not all(ch.isalnum() or ch in "_.-@/$" for ch in key) or (not eq and prefix != "~"):
        return None
    if not eq:
        return LauncherOverride(raw, prefix, key, None, None, line, unknown)
    return LauncherOverride(raw, prefix, key, parse_value(value_text), value_text, line, unknown)


# ----------------------------------------------------------------------------- config
def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for key, value in flat.items():
        set_path(root, key, value)
    return root


def set_path(config: dict[str, Any], key: str, value: Any) -> None:
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = node[part] = {}
        node = nxt
    node[parts[-1]] = copy.deepcopy(value)


def del_path(config: dict[str, Any], key: str) -> None:
    node: Any = config
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def get_path(config: dict[str, Any], key: str, default: Any = None) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def merged_config(overrides: list[LauncherOverride], engine: str) -> dict[str, Any]:
    """verl's defaults for ``engine`` with the overrides applied in order, interpolations resolved."""
    config = unflatten(engine_defaults(engine))
    for ov in overrides:
        if ov.is_group or ov.unknown:
            continue
        if ov.prefix == "~":
            del_path(config, ov.key)
        else:
            set_path(config, ov.key, ov.value)
    return resolve(config)


_SENTINEL = object()


def resolve(config: dict[str, Any]) -> dict[str, Any]:
    """Resolve OmegaConf interpolations in every string value (unresolvable ones stay as text)."""

    def lookup(key: str, here: list[str], depth: int) -> Any:
        if key.startswith("."):
            up = len(key) - len(key.lstrip("."))
            base = here[:-up] if up <= len(here) else []
            key = ".".join(base + [key.lstrip(".")]) if key.lstrip(".") else ".".join(base)
        value = get_path(config, key, _SENTINEL)
        if value is _SENTINEL or value == MISSING:
            return _SENTINEL
        return walk(value, key.split("."), depth + 1)

    def interp(body: str, here: list[str], depth: int) -> Any:
        if body.startswith("oc.select:"):
            args = _split_args(body[len("oc.select:"):])
            key = args[0].strip()
            default = substitute(args[1].strip(), here, depth) if len(args) > 1 else None
            if isinstance(default, str):
                default = parse_value(default)
            found = lookup(key, here, depth)
            return default if found is _SENTINEL else found
        if ":" in body:  # another resolver (oc.env, ...): not static
            return _SENTINEL
        return lookup(body.strip(), here, depth)

    def substitute(text: str, here: list[str], depth: int) -> Any:
        if depth > 32 or "${" not in text:
            return text
        pieces: list[Any] = []
        i = 0
        while i < len(text):
            start = text.find("${", i)
            if start < 0:
                pieces.append(text[i:])
                break
            pieces.append(text[i:start])
            end = _close(text, start)
            if end < 0:
                pieces.append(text[start:])
                break
            value = interp(text[start + 2:end], here, depth)
            pieces.append(text[start:end + 1] if value is _SENTINEL else value)
            i = end + 1
        pieces = [p for p in pieces if p != ""]
        if len(pieces) == 1:
            return pieces[0]
        return "".join("null" if p is None else str(p) if not isinstance(p, bool) else str(p).lower()
                       for p in pieces)

    def walk(node: Any, here: list[str], depth: int) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, here + [k], depth) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, here, depth) for v in node]
        if isinstance(node, str):
            return substitute(node, here, depth)
        return node

    return walk(config, [], 0)


def _close(text: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(text):
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_args(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out
