"""Lint a verl launcher script statically: what would verl (or the script itself) do wrong.

The script is evaluated without running it (:mod:`harness.verl.bashparse`); each trainer command
line's Hydra overrides are merged over verl's defaults (:mod:`harness.verl.overrides`) and the
result is checked by the shared config-safety rules (:mod:`harness.config.safety.rules`, the ones that
are about verl, not about this harness's own engine) plus the launcher-only rules registered
here. Findings carry the script line of the override (or of the string it was defined in).
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.config.safety import RULES, Finding, RuleContext, run_rules
from harness.config.safety import rules as _shared_rules  # noqa: F401  (registers the shared rules first)
from harness.errors import HarnessError
from harness.registry import Registry
from harness.verl.bashchars import FIX, first_refused
from harness.verl.bashparse import Arg, Evaluation, Invocation, ScriptError, evaluate_script
from harness.verl.overrides import (
    HYDRA_FLAGS,
    MISSING,
    LauncherOverride,
    engines,
    get_path,
    known_key,
    merged_config,
    parse_override,
    set_path,
)

# Shared safety rules that mirror verl's own startup checks (the rest are about this harness's engine).
VERL_RULES = ("code-loading-key", "max-model-len-too-small", "max-model-len-exceeds-positions",
              "batched-tokens-below-model-len", "devices-per-node", "batch-divisible-by-world",
              "mini-batch-vs-train-batch", "micro-batch-exclusive", "sp-needs-remove-padding", "ulysses-heads",
              "dp-vs-fsdp-size", "experts-vs-ep", "rollout-tp-fits")
INJECTABLE = ("arg", "unset", "required", "passthrough")  # unknowns a caller controls
MAX_SCRIPT_BYTES = 256 << 10  # verl's launchers are a few KB; past this one is refused, not read
MAX_FINDINGS = 1000  # per file; past this one finding counts the rest
MAX_TEXT = 400  # characters of a finding's message or fix; script text quoted in one is cut to this
DUPLICATE_LINES_SHOWN = 5  # line numbers a duplicate-key finding lists
MAX_SUGGESTIONS = 20  # unknown keys per trainer command that get a "did you mean" (difflib is slow)


@dataclass(frozen=True)
class LintRule:
    id: str
    severity: str
    summary: str


LINT_RULES: Registry[LintRule] = Registry("launcher lint rule")


def lint_rule(rule_id: str, severity: str, summary: str) -> None:
    """Register a launcher-only rule (an id the safety rules hold already is a ValueError too)."""
    if rule_id in RULES:
        raise ValueError(f"rule '{rule_id}' is already registered (a safety rule)")
    LINT_RULES.register(rule_id)(LintRule(rule_id, severity, summary))


lint_rule("argument-pass-through", "error",
          "the script forwards its arguments ($@, $*, $1, or an unset variable as a whole argument) to the trainer")
lint_rule("undefined-variable", "error", "a variable is used but never set while `set -u` is on: bash aborts")
lint_rule("unknown-key", "error", "an override names a key verl's config does not have: verl refuses to start")
lint_rule("append-existing-key", "error", "+key=value adds a key verl's config already has: verl refuses to start")
lint_rule("missing-mandatory", "error", "a key verl marks mandatory (???) is never set: verl refuses to start")
lint_rule("unresolved-value", "warning", "a value cannot be known without running the script; it is not guessed")
lint_rule("no-trainer-command", "warning", "no verl trainer command line was found")
lint_rule("too-many-findings", "warning", f"more than {MAX_FINDINGS} findings: the rest are counted, not listed "
          "(an error when one of them is)")


def lint_finding(rule_id: str, message: str, fix: str, line: int | None, key: str | None = None) -> Finding:
    rule = LINT_RULES.get(rule_id) or RULES[rule_id]
    return Finding(rule_id, rule.severity, message, fix, key, line)


@dataclass
class TrainerCall:
    """One trainer command line: its overrides, the engine view and the merged config."""

    line: int
    program: str
    overrides: list[LauncherOverride]
    engine: str | None  # dp | megatron | torchtitan | veomni | None (not known statically)
    config: dict[str, Any]
    lines: dict[str, int]
    unresolved: dict[str, LauncherOverride] = field(default_factory=dict)
    config_name: str | None = None


@dataclass
class LintResult:
    file: str
    findings: list[Finding]
    calls: list[TrainerCall]
    evaluation: Evaluation

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "errors": len(self.errors),
            "warnings": len(self.findings) - len(self.errors),
            "findings": [f.as_dict() for f in self.findings],
            "trainer_commands": [{"line": c.line, "program": c.program, "engine": c.engine,
                                  "overrides": [{"line": o.line, "override": o.raw} for o in c.overrides]}
                                 for c in self.calls],
        }


# ----------------------------------------------------------------------------- entry points
def read_script(path: str) -> str:
    """The launcher's text: a regular UTF-8 file of at most :data:`MAX_SCRIPT_BYTES` holding no character the
    bash parser is not given (:mod:`harness.verl.bashchars`); anything else is one line (exit 2)."""
    p = Path(path)
    if not p.exists():
        raise HarnessError("launcher script not found", file=path, fix="check the path")
    if not p.is_file():
        raise HarnessError("not a regular file", file=path, fix="give the path of a bash launcher script")
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError as err:
        raise HarnessError(f"cannot read the script ({err.strerror})", file=path, fix="check the permissions")
    if len(data) > MAX_SCRIPT_BYTES:
        raise HarnessError(f"launcher over the {MAX_SCRIPT_BYTES:,}-byte limit", file=path,
                           fix="lint the script that starts the trainer (launchers are a few KB)")
    if b"\x00" in data:
        raise HarnessError("not a text file (it contains NUL bytes)", file=path, fix="give a bash launcher script")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HarnessError(f"not UTF-8 text (byte {err.start})", file=path, fix="give a bash launcher script") from None
    refused = first_refused(text)
    if refused is not None:
        raise HarnessError(refused.message(text), file=path, fix=FIX)
    return text


def lint_file(path: str, profile: dict[str, Any] | None = None) -> LintResult:
    text = read_script(path)
    try:
        return lint_text(text, path, profile)
    except ScriptError as err:
        where = f"line {err.line}: " if err.line else ""
        raise HarnessError(f"{where}{err.message}", file=path,
                           fix="simplify that construct, or lint the trainer command on its own") from None


def lint_text(text: str, file: str = "<script>", profile: dict[str, Any] | None = None) -> LintResult:
    ev = evaluate_script(text)
    findings: list[Finding] = []
    for issue in ev.issues:
        findings.append(lint_finding(
            "undefined-variable", issue.message,
            f"set {issue.name} before this line or give it a default: ${{{issue.name}:-value}}", ev.line(issue.pos)))
    calls = [_lint_call(inv, profile, findings) for inv in ev.invocations]
    if not calls:
        findings.append(lint_finding("no-trainer-command", "no `python -m verl.trainer.main_ppo` (or main_*) command "
                                     "line found; nothing else was checked", "lint the script that starts the trainer",
                                     None))
    return LintResult(file, _bounded(_dedupe(findings)), calls, ev)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[Any, ...]] = set()
    out: list[Finding] = []
    for f in findings:
        k = (f.rule, f.line, f.message)
        if k not in seen:
            seen.add(k)
            out.append(f)
    return sorted(out, key=lambda f: (f.line or 0, f.rule))


def _bounded(findings: list[Finding]) -> list[Finding]:
    """At most :data:`MAX_FINDINGS` findings of at most :data:`MAX_TEXT` characters each (message and fix): the
    output stays small whatever the script repeats. The rest are counted by one finding, an error if any was."""
    def cut(text: str) -> str:
        return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}… ({len(text) - MAX_TEXT:,} more characters)"

    out = [f if len(f.message) <= MAX_TEXT and len(f.fix) <= MAX_TEXT else replace(f, message=cut(f.message),
                                                                                        fix=cut(f.fix))
           for f in findings[:MAX_FINDINGS]]
    rest = findings[MAX_FINDINGS:]
    if rest:
        n_err = sum(f.severity == "error" for f in rest)
        out.append(Finding("too-many-findings", "error" if n_err else "warning",
                           f"{len(rest):,} more finding(s) ({n_err:,} error(s)) from line {rest[0].line} on are not "
                           "listed", "fix the ones listed and lint again", None, rest[0].line))
    return out


# ----------------------------------------------------------------------------- one trainer call
def _lint_call(inv: Invocation, profile: dict[str, Any] | None, out: list[Finding]) -> TrainerCall:
    overrides: list[LauncherOverride] = []
    config_name = None
    opaque: list[int] = []  # lines of arguments whose key is not known statically
    args = list(inv.args)
    k = 0
    while k < len(args):
        arg = args[k]
        k += 1
        if _passthrough(arg, out):
            continue
        flag = arg.text.split("=", 1)[0]
        if flag in HYDRA_FLAGS:
            value = arg.text.split("=", 1)[1] if "=" in arg.text else (args[k].text if k < len(args) else "")
            if "=" not in arg.text:
                k += 1
            if flag in ("--config-name", "-cn"):
                config_name = value
            continue
        ov = parse_override(arg.text, arg.line, arg.unknown)
        if ov is None or "$" in ov.key:
            if arg.unknown:
                opaque.append(arg.line)
                if not all(u.kind == "undefined" for u in arg.unknown):
                    out.append(_unresolved(arg, None))
            else:
                out.append(lint_finding("unknown-key", f"'{arg.text}' is not a Hydra override (key=value)",
                                        "write overrides as key=value, +key=value, ++key=value or ~key", arg.line))
            continue
        if ov.unknown and not any(u.kind == "undefined" for u in ov.unknown):
            out.append(_unresolved(arg, ov.key))
        overrides.append(ov)
    engine = _engine(overrides, config_name, inv.line, out)
    _duplicates(overrides, out)
    judged: list[Finding] = []  # findings that hold only if no unresolved argument changes the config
    replaced = _group_packages(overrides, out)
    if engine is not None:
        _key_checks(overrides, engine, out, judged, replaced)
    config = merged_config(overrides, engine or "dp")
    lines: dict[str, int] = {}
    unresolved: dict[str, LauncherOverride] = {}
    for ov in overrides:
        if ov.is_group:
            continue
        lines[ov.key] = ov.line
        if ov.unknown:
            unresolved[ov.key] = ov
            set_path(config, ov.key, ov.raw.split("=", 1)[-1])  # rules skip a value that is not plain
    call = TrainerCall(inv.line, inv.program, overrides, engine, config, lines, unresolved, config_name)
    if engine is not None:
        _missing(call, judged)
    ctx = RuleContext(config=config, profile=profile, architecture=architecture_for(config), lines=lines)
    for f in run_rules(ctx, only=VERL_RULES):
        judged.append(_as_verl_checks_it(f if f.line is not None else replace(f, line=inv.line), engine, config))
    out.extend(_unproven(judged, opaque, engine is None or bool(replaced)))
    return call


def _as_verl_checks_it(f: Finding, engine: str | None, config: dict[str, Any]) -> Finding:
    """A shared rule's error where verl itself does not fail that way becomes a warning saying why: the
    batch rules assume FSDP's data-parallel size (megatron's is world / (tp × pp × cp)) and verl skips the
    batch check under dynamic batch sizes; a rollout TP group larger than a node is run across nodes."""
    if f.severity != "error":
        return f
    why = None
    if f.rule in ("batch-divisible-by-world", "mini-batch-vs-train-batch") and engine == "megatron":
        why = "verl's megatron engine sizes batches by world / (tp × pp × cp), which this check does not model"
    elif f.rule == "batch-divisible-by-world" and get_path(config, "actor_rollout_ref.actor.use_dynamic_bsz") is True:
        why = "verl skips this check when actor.use_dynamic_bsz is on"
    elif f.rule == "rollout-tp-fits" and "devices per node" in f.message:
        why = "verl runs such a rollout replica across nodes; tensor parallelism across nodes is slow"
    return f if why is None else replace(f, severity="warning", message=f"{f.message} ({why})")


def _unproven(findings: list[Finding], opaque: list[int], no_defaults: bool) -> list[Finding]:
    """Errors whose premise is not resolved statically become warnings that say why: an argument whose
    key is unknown may set what the check found missing or wrong, and without the config's defaults
    a check reads values verl may not have."""
    if not opaque and not no_defaults:
        return findings
    if opaque:
        where = ", ".join(str(n) for n in dict.fromkeys(opaque))
        why = f"unless the argument(s) on line(s) {where}, not resolved statically, change it"
    else:
        why = "if the config's defaults are the ones verl ships; this command selects a config they do not cover"
    return [f if f.severity != "error" else replace(f, severity="warning", message=f"{f.message} ({why})")
            for f in findings]


def _passthrough(arg: Arg, out: list[Finding]) -> bool:
    head = next((u for u in arg.unknown), None)
    passthrough = arg.passthrough
    whole = head is not None and head.kind in INJECTABLE and arg.text.startswith(head.text)
    if not (passthrough or whole):
        return False
    what = head.text if head is not None else arg.text
    if passthrough:
        why = "forwards the script's arguments"
    elif head is not None and head.kind == "arg":
        why = "forwards a script argument"
    else:
        why = "forwards a variable the script never sets"
    out.append(lint_finding(
        "argument-pass-through",
        f"{what} {why} to the trainer as overrides: whoever runs the script can add any override, including "
        "code-loading keys such as data.trust_remote_code=True (remote code execution)",
        "list every override in the script; take run-time choices through named variables with defaults "
        "(e.g. ENGINE=${ENGINE:-vllm}) used only as values", arg.line))
    return True


def _unresolved(arg: Arg, key: str | None) -> Finding:
    reasons = "; ".join(dict.fromkeys(u.describe() for u in arg.unknown))
    what = f"the value of {key}" if key else f"argument '{arg.text}'"
    return lint_finding("unresolved-value", f"{what} cannot be resolved statically ({reasons}); checks that need it "
                        "are skipped", "write the value in the script, or make sure the environment provides it",
                        arg.line, key)


# --config-name -> the engine its defaults select (verl's ppo_megatron_trainer.yaml is ppo_trainer with
# model_engine megatron)
CONFIG_ENGINES = {"ppo_trainer": "dp", "ppo_megatron_trainer": "megatron"}


def _engine(overrides: list[LauncherOverride], config_name: str | None, line: int, out: list[Finding]) -> str | None:
    name = (config_name or "ppo_trainer").removesuffix(".yaml")
    if name not in CONFIG_ENGINES:
        out.append(lint_finding("unresolved-value", f"--config-name {config_name}: only the defaults of verl's "
                                f"{' and '.join(CONFIG_ENGINES)} configs are shipped, so key names and defaults are "
                                "not checked", "lint a launcher of one of those configs", line))
        return None
    engine = CONFIG_ENGINES[name]
    for ov in overrides:
        if ov.key == "model_engine":
            if ov.unknown:
                out.append(_unresolved_engine(ov, line))
                return None
            engine = str(ov.value)
    if engine not in engines():
        out.append(lint_finding("unresolved-value", f"model_engine={engine}: verl {_revision()} ships no such engine "
                                f"config ({', '.join(engines())}), so key names are not checked",
                                f"use one of {', '.join(engines())}", line, "model_engine"))
        return None
    return engine


def _unresolved_engine(ov: LauncherOverride, line: int) -> Finding:
    return lint_finding("unresolved-value", f"model_engine cannot be resolved statically ({ov.raw}): key names "
                        "are not checked", "write the engine in the script", ov.line or line, "model_engine")


def _duplicates(overrides: list[LauncherOverride], out: list[Finding]) -> None:
    """One finding per key given more than once, at its first line: the count and the first lines."""
    by_key: dict[str, list[int]] = {}
    for ov in overrides:
        by_key.setdefault(ov.key, []).append(ov.line)
    for key, lines in by_key.items():
        if len(lines) < 2:
            continue
        shown = ", ".join(str(n) for n in lines[:DUPLICATE_LINES_SHOWN])
        more = len(lines) - DUPLICATE_LINES_SHOWN
        where = f"lines {shown}" + (f", … and {more:,} more" if more > 0 else "")
        out.append(lint_finding(
            "duplicate-key", f"{key} is given {len(lines):,} times ({where}): the last one (line {lines[-1]}) wins "
            "and the others are dead", f"keep one {key} override", lines[0], key))


def _group_packages(overrides: list[LauncherOverride], out: list[Finding]) -> tuple[str, ...]:
    """Config packages a Hydra group override replaces (``actor@actor_rollout_ref.actor=mlite_actor``):
    their keys come from a config whose keys are not shipped, so they are not checked."""
    packages = []
    for ov in overrides:
        if not ov.is_group or ov.key == "model_engine":
            continue
        group, _, package = ov.key.partition("@")
        package = package or group.replace("/", ".")
        packages.append(package)
        out.append(lint_finding("unresolved-value", f"{ov.raw} selects the {group} config {ov.value_text!r}: its "
                                f"keys are not shipped, so keys under {package} are not checked",
                                "use the engine's own config group (model_engine=...) to have them checked",
                                ov.line, ov.key))
    return tuple(packages)


def _key_checks(overrides: list[LauncherOverride], engine: str, out: list[Finding], judged: list[Finding],
                replaced: tuple[str, ...] = ()) -> None:
    suggestions = MAX_SUGGESTIONS  # difflib is slow: only the first unknown keys get a "did you mean"
    for ov in overrides:
        if ov.is_group or ov.key.startswith("hydra.") or "$" in ov.key:
            continue
        if any(ov.key == p or ov.key.startswith(p + ".") for p in replaced):
            continue
        known = known_key(ov.key, engine)
        if ov.prefix in ("", "~") and not known:
            verb = "delete" if ov.prefix == "~" else "set"
            owners = [e for e in engines() if e != engine and known_key(ov.key, e)]
            if owners:  # the engine choice could come from an unresolved argument
                judged.append(lint_finding(
                    "unknown-key", f"{ov.key} belongs to the {' / '.join(owners)} engine config, not to the {engine} "
                    f"engine this command selects: Hydra cannot {verb} it and verl refuses to start",
                    f"select the engine with model_engine={owners[0]} (an override of its own, not under "
                    "actor_rollout_ref), or remove the key", ov.line, ov.key))
                continue
            close = _close_key(ov.key, engine) if suggestions > 0 else None
            suggestions -= 1
            hint = f"did you mean '{close}'? otherwise " if close else ""
            todo = f"add it with +{ov.key}=... if verl reads it" if ov.prefix == "" else "remove it"
            out.append(lint_finding(
                "unknown-key", f"verl's config ({engine} engine, verl {_revision()}) has no key {ov.key}: Hydra cannot "
                f"{verb} it and verl refuses to start", hint + todo, ov.line, ov.key))
        elif ov.prefix == "+" and known and _append_refused(ov, engine):
            out.append(lint_finding(
                "append-existing-key", f"+{ov.key} adds a key verl's config already has: Hydra refuses it",
                f"write {ov.key}=... (or ++{ov.key}=... to set it either way)", ov.line, ov.key))


def _append_refused(ov: LauncherOverride, engine: str) -> bool:
    """Hydra refuses ``+key=value`` only where the key holds a value that is not null and the new value
    is not a mapping or list (those are merged)."""
    from harness.verl.overrides import engine_defaults

    if isinstance(ov.value, (dict, list)):
        return False
    return engine_defaults(engine).get(ov.key, "section") is not None


def _missing(call: TrainerCall, out: list[Finding]) -> None:
    def walk(node: Any, prefix: str) -> None:
        if node.get("enable") is False:  # a disabled section is never read
            return
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict):
                walk(value, path)
            elif value == MISSING and path not in call.unresolved:
                out.append(lint_finding("missing-mandatory", f"{path} is mandatory in verl's config and never set: "
                                        "verl refuses to start", f"add {path}=... to the trainer command", call.line,
                                        path))

    walk(call.config, "")


@functools.cache
def _all_keys(engine: str) -> tuple[str, ...]:
    from harness.verl.overrides import engine_defaults

    return tuple(engine_defaults(engine))


@functools.cache
def _by_leaf(engine: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k in _all_keys(engine):
        out.setdefault(k.rsplit(".", 1)[-1], []).append(k)
    return out


def _close_key(key: str, engine: str) -> str | None:
    same_leaf = _by_leaf(engine).get(key.rsplit(".", 1)[-1], [])
    pool = same_leaf or list(_all_keys(engine))
    match = difflib.get_close_matches(key, pool, n=1, cutoff=0.5 if same_leaf else 0.8)
    return match[0] if match else None


def _revision() -> str:
    from harness.verl.overrides import verl_keys

    return str(verl_keys().get("revision", "?"))[:12]


# ----------------------------------------------------------------------------- architecture
@functools.cache
def _known_models() -> tuple[tuple[str, str, str], ...]:
    """(model-name basename lowercased, recipe name, family) for the shipped recipes."""
    from harness.config.recipe import load_recipe_file, recipe_names, recipe_path

    out = []
    for name in recipe_names():
        try:
            recipe = load_recipe_file(recipe_path(name))
        except HarnessError:
            continue
        out.append((recipe["model"]["name"].rsplit("/", 1)[-1].lower(), name, recipe["model"]["family"]))
    return tuple(out)


def recipe_for_model(model_path: Any) -> tuple[str, str] | None:
    """(recipe name, family) of the shipped recipe whose model the launcher's model path names."""
    if not isinstance(model_path, str) or not model_path.strip():
        return None
    base = model_path.rstrip("/").rsplit("/", 1)[-1].lower()
    for model, recipe, family in _known_models():
        if base == model:
            return recipe, family
    return None


def architecture_for(config: dict[str, Any]) -> dict[str, Any] | None:
    """The architecture of a shipped recipe's model when the launcher's model path names it."""
    found = recipe_for_model(get_path(config, "actor_rollout_ref.model.path"))
    if found is None:
        return None
    from harness.config.recipe import load_recipe_file, recipe_path

    return load_recipe_file(recipe_path(found[0]))["model"]["architecture"]
