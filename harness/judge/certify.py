"""Hardware certification: suites, checks, certificates and their verification.

A suite (``recipes/certification/<profile>.json``, schema ``suite``) lists recipe runs and what each
must achieve on the profile. ``harness certify`` runs it (``harness.commands.certify``); the checks
here turn the run directories into numbers:

- ``numerics`` — the run judged by :mod:`harness.judge.compare` against the entry's reference baseline at
  the suite's tier (``band`` ⇒ band + statistical). A reference recorded on another profile (an NPU
  suite naming the GPU reference) is compared with the same tiers; only the profile may differ
  (recipe hash, architecture and scale must match) and exact is not allowed. The value is the count
  of failed gated checks (a refusal has no value and fails).
- ``throughput`` / ``mfu`` — the baseline policy's quantile over steady steps of ``perf/throughput``
  (tokens/s per device) and ``perf/mfu`` (against the profile's peak), at least the suite's floor.
- ``memory`` — peak ``perf/max_memory_allocated_gb`` at most the suite's fraction of the profile's
  device memory (host RAM budget on cpu).
- ``determinism`` — a second run with the same seed: the count of non-timing metric values that are
  not bitwise equal must be 0 (not applicable when the resolved recipe is not deterministic).

A certificate (schema ``certificate``) stores every check with its numbers and SHA-256 digests of
every input (paths relative to the repository root, copied into the certificate's ``inputs/``) and
every file the runs left (relative to the certificate's directory). :func:`verify` lists every
discrepancy as ``FILE::/pointer: message``:

- trust: the signature is checked only against the key of the keyid the user gives (``--keyid``, published
  by the certifier out of band; the key file defaults to the one beside the certificate and must have that
  keyid; :func:`harness.judge.attest.trusted_key`);
- files: every file under the certificate's directory is a subject of the signed Statement (only
  ``certificate.json`` itself and ``signing-key.pub.pem`` are not), the directory holds nothing else — no
  symbolic link, nothing but regular files — and every subject is there with its digest: the run files
  (``runs/…``), the copy of the inputs (``inputs/…``), ``system-description.json`` and ``certificate.html``
  (:func:`harness.judge.attest.directory_problems`);
- inputs: against ``root`` (default: the certificate's own ``inputs/`` copy; ``--root CHECKOUT`` asks whether a
  checkout still holds the files certified);
- contents: every check re-derived from the run files, baselines, suite and profile, the ``system`` block from
  the runs' manifests, the summary and the result from the checks.

Every line it returns may quote what the files hold: print it with :func:`harness.errors.shown`.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.typed_files import Profile
from harness.errors import HarnessError
from harness.jsonio import load_json_strict, write_bytes_atomic
from harness.judge.attest import (
    INPUTS_DIR,
    digest_problem,
    directory_problems,
    expected_files,
    open_certificate,
    sha256_regular,
    signature_problems,
    subject_problems,
    trusted_key,
)
from harness.judge.baseline import (
    DEFAULT_POLICY,
    MEMORY_METRIC,
    THROUGHPUT_METRIC,
    is_timing,
    load_baseline,
    load_series,
    quantile,
    steady_speed,
)
from harness.judge.compare import refusal_reasons
from harness.judge.system import derive_system, system_disagreements
from harness.judge.tiers import BAND, EXACT, STATISTICAL, TIERS, Context, applied_with
from harness.paths import ROOT, SUITES_DIR
from harness.records.base import dump, parse, read
from harness.records.certificate import CertCheck, Certificate, DigestInput, Suite, SuiteEntry, Summary
from harness.records.run import Manifest
from harness.records.verdict import Verdict
from harness.schema import pointer, schema_errors

CERT_FILE = "certificate.json"
HTML_FILE = "certificate.html"
MFU_METRIC = "perf/mfu"
RESULT_FILES = (("manifest", "manifest.json"), ("metrics", "metrics.jsonl"), ("verdict", "verdict.json"),
                ("mlperf-log", "mlperf.log"))  # any other file a run leaves (INCOMPLETE, …) is role "other"


# ----------------------------------------------------------------------------- files and digests
def sha256_file(path: Path) -> str:
    """SHA-256 of a regular file (streamed; a FIFO or device is refused, never read)."""
    return sha256_regular(Path(path))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rel(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` in POSIX form; a path outside ``base`` is an error."""
    try:
        return Path(path).resolve().relative_to(Path(base).resolve()).as_posix()
    except ValueError:
        raise HarnessError(f"{path} is not inside {base}", file=str(path),
                           fix="keep certification inputs in the repository and results under --out") from None


def lock_files(root: Path) -> list[Path]:
    """The dependency locks an install is pinned with: constraints.txt and images/*/*.lock, if present."""
    out = [root / "constraints.txt"] if (root / "constraints.txt").is_file() else []
    out += sorted((root / "images").glob("*/*.lock"), key=lambda p: p.as_posix().encode())
    return out


# ----------------------------------------------------------------------------- suites
def suite_path(profile: str, root: Path | None = None) -> Path:
    return (root / "recipes" / "certification" if root else SUITES_DIR) / f"{profile}.json"


def load_suite_file(path: Path, profile: str | None = None) -> Suite:
    """Strict load + schema, read into :class:`Suite`, then the cross-field checks (profile matches, unique ids,
    no cross-profile exact)."""
    suite = parse(load_json_strict(path), Suite, "suite", str(path))
    if profile is not None and suite.profile != profile:
        raise HarnessError(f"suite is for profile '{suite.profile}', not '{profile}'", file=str(path),
                           key_path="/profile", fix=f"set profile to '{profile}'")
    seen: set[str] = set()
    for i, entry in enumerate(suite.entries):
        if entry.id in seen:
            raise HarnessError(f"duplicate entry id '{entry.id}'", file=str(path), key_path=f"/entries/{i}/id",
                               fix="give every entry its own id")
        seen.add(entry.id)
        ref = baseline_profile(entry)
        if ref is not None and ref != suite.profile and entry.numerics.tier == EXACT.name:
            raise HarnessError(f"exact tier against another profile's baseline ({ref})", file=str(path),
                               key_path=f"/entries/{i}/numerics/tier",
                               fix=f"use {BAND.name} (or {STATISTICAL.name}) for a cross-vendor reference")
    return suite


def load_suite(profile: str) -> tuple[Path, Suite]:
    path = suite_path(profile)
    if not path.is_file():
        have = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.json"))) or "none"
        raise HarnessError(f"no certification suite for profile '{profile}'", file=str(path),
                           fix=f"write one (schemas/v1/suite.schema.json); suites exist for: {have}")
    return path, load_suite_file(path, profile)


def baseline_profile(entry: SuiteEntry) -> str | None:
    """The profile a reference baseline was recorded on, from its file name ``<profile>-<scale>.json``."""
    stem = Path(entry.numerics.reference_baseline).stem
    suffix = f"-{entry.scale}"
    return stem[: -len(suffix)] if stem.endswith(suffix) else None


# ----------------------------------------------------------------------------- numerics
def judge_reference(run_dir: Path, baseline_path: Path, tier: str, *, write: bool) -> Verdict:
    """A compare Verdict of ``run_dir`` against ``baseline_path`` at ``tier``, across profiles if need be."""
    from harness.judge.compare import Subject, judge, seal, subject_of, write_verdict
    from harness.judge.summary import failure_reasons

    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise HarnessError("run directory has no manifest.json (the run did not start)", file=str(run_dir),
                           fix="read the run's output above")
    manifest = read(manifest_path, Manifest, "manifest")
    baseline = load_baseline(baseline_path)
    same_profile = manifest.profile == baseline.profile
    verdict = judge(run_dir, None, baseline_path, tier=tier, write=write and same_profile)
    if same_profile:
        return verdict
    # Cross-vendor reference: compare refused it for the profile (once the run and the baseline were
    # loaded); apply the same refusals except the profile, then the suite's tiers.
    reasons = list(verdict.reasons)
    if verdict.status == "refused" and verdict.baseline is not None:
        run = subject_of(manifest)
        reasons = refusal_reasons(Subject(run.recipe_hash, run.architecture, baseline.profile, run.scale), baseline)
        if tier == EXACT.name:
            reasons.append(f"{EXACT.name} tier needs a baseline of the run's own profile, not '{baseline.profile}'")
    verdict.reasons = reasons
    if verdict.status == "refused" and verdict.baseline is not None and not reasons:
        tiers = applied_with(TIERS[tier])
        upto = min(manifest.steps.completed, baseline.steps)
        ctx = Context(load_series(run_dir), baseline, upto)
        verdict.tier, verdict.tiers_applied = tiers[0], tiers
        verdict.tier_reason = (f"cross-vendor reference recorded on '{baseline.profile}': {tier} tier set by the "
                               "certification suite (throughput and memory are judged by the suite's floors)")
        verdict.checks = [c for t in tiers for c in TIERS[t](ctx)]
        verdict.reasons = failure_reasons(verdict.checks)
        verdict.status = "fail" if verdict.reasons else "pass"
        if manifest.steps.completed != baseline.steps:
            verdict.notices.append(f"compared the first {upto} steps (run {manifest.steps.completed}, "
                                   f"baseline {baseline.steps})")
        seal(verdict)
    if write:
        write_verdict(run_dir, verdict)
    return verdict


def _check(entry: SuiteEntry, name: str, run: str, value: float | None, threshold: float | None,
           comparison: str | None, unit: str, detail: str) -> CertCheck:
    value = value if value is None or math.isfinite(value) else None
    return CertCheck.model_validate({
        "entry": entry.id, "name": name, "run": run, "value": value, "threshold": threshold,
        "comparison": comparison, "unit": unit, "outcome": _outcome(value, threshold, comparison), "detail": detail})


def _outcome(value: float | None, threshold: float | None, comparison: str | None) -> str:
    if comparison is None:
        return "not-applicable"
    if value is None or threshold is None:
        return "fail"
    ok = value >= threshold if comparison == ">=" else value <= threshold
    return "pass" if ok else "fail"


def derive_outcome(c: CertCheck) -> str:
    """pass/fail from value, comparison and threshold; a check without a comparison is not applicable."""
    return _outcome(c.value, c.threshold, c.comparison)


def numerics_check(entry: SuiteEntry, run_dir: Path, run: str, baseline_path: Path, *, write: bool) -> CertCheck:
    tier = entry.numerics.tier
    try:
        v = judge_reference(run_dir, baseline_path, tier, write=write)
    except HarnessError as err:
        return _check(entry, "numerics", run, None, 0, "<=", "failed checks", f"not judged: {err.one_line()}")
    if v.status in ("refused", "no-baseline"):
        return _check(entry, "numerics", run, None, 0, "<=", "failed checks",
                      f"{v.status}: {'; '.join(v.reasons or v.notices)}")
    groups = applied_with(TIERS[v.tier]) if v.tier else []
    gated = [c for c in v.checks if c.group in groups]
    bad = [c for c in gated if not c.passed]
    detail = (f"tier {v.tier} ({', '.join(v.tiers_applied)}) vs {entry.numerics.reference_baseline}: "
              f"{len(gated) - len(bad)}/{len(gated)} gated checks passed"
              + (f"; first failure {bad[0].group} {bad[0].metric}: {bad[0].detail}" if bad else ""))
    other = sorted({c.group for c in v.checks if c.group not in groups and not c.passed})
    if other:
        detail += (f"; verdict.json also failed {', '.join(other)} against the baseline's own numbers "
                   "(informational: the suite's floors judge performance)")
    return _check(entry, "numerics", run, float(len(bad)), 0, "<=", "failed checks", detail)


# ----------------------------------------------------------------------------- performance
def _steady_quantile(series: dict[str, dict[int, float]], metric: str) -> tuple[float | None, int, str]:
    """The policy's quantile over the steady steps with uncontended CPUs, their count, and what was left out."""
    pol = DEFAULT_POLICY.throughput
    speed = steady_speed(series, metric, pol.warmup_steps)
    if not speed.judgeable:  # a busy machine: every step counts (a lower bound); a miss says to re-run idle
        vals, note = speed.all_values, (f"; measured while {speed.why_not()} (a lower bound: if below the floor, re-run on an "
                                    "idle machine)")
    else:
        vals = speed.values
        note = f" ({speed.left_out} contended steps left out)" if speed.left_out else ""
    return (quantile(vals, pol.quantile) if vals else None), len(vals), note


def _qname() -> str:
    pol = DEFAULT_POLICY.throughput
    return f"p{pol.quantile * 100:.0f} over steady steps (first {pol.warmup_steps} skipped)"


def perf_checks(entry: SuiteEntry, profile: Profile, series: dict[str, dict[int, float]], run: str) -> list[CertCheck]:
    out = []
    acc = profile.accelerator
    tp, n, note = _steady_quantile(series, THROUGHPUT_METRIC)
    floor = entry.throughput_floor_tokens_per_s_per_device
    out.append(_check(entry, "throughput", run, tp, floor, ">=", "tokens/s/device",
                      f"{THROUGHPUT_METRIC} {_qname()}, {n} steps: "
                      + (f"{tp:,.1f}" if tp is not None else "no steady steps") + f" vs floor {floor:,.1f}{note}"))
    mfu, n, note = _steady_quantile(series, MFU_METRIC)
    out.append(_check(entry, "mfu", run, mfu, entry.mfu_floor, ">=", "fraction of peak",
                      f"{MFU_METRIC} {_qname()} against {acc.peak_bf16_tflops:g} TFLOP/s per device: "
                      + (f"{mfu:.5f}" if mfu is not None else "no steady steps")
                      + f" vs floor {entry.mfu_floor:g}{note}"))
    mem = [v for v in series.get(MEMORY_METRIC, {}).values() if math.isfinite(v)]
    peak_gb = max(mem) if mem else None
    budget = entry.memory_budget_fraction * acc.memory_gb
    out.append(_check(entry, "memory", run, peak_gb, budget, "<=", "GB",
                      f"peak {MEMORY_METRIC} " + (f"{peak_gb:.3f} GB" if peak_gb is not None else "missing")
                      + f" vs budget {entry.memory_budget_fraction:g} x {acc.memory_gb:g} GB"))
    return out


def determinism_check(entry: SuiteEntry, run_dirs: list[Path], runs: list[str]) -> CertCheck:
    from harness.judge.tiers import bitwise_equal

    manifests = []
    for d, r in zip(run_dirs, runs):
        try:
            manifests.append(read(d / "manifest.json", Manifest, "manifest"))
        except HarnessError:
            return _check(entry, "determinism", runs[-1], None, 0, "<=", "values", f"{r} has no readable manifest")
    if not all(m.deterministic for m in manifests):
        return _check(entry, "determinism", runs[-1], None, None, None, "values",
                      "not applicable: the resolved recipe is not deterministic")
    a, b = (load_series(d) for d in run_dirs[:2])
    diffs: list[tuple[str, int]] = []
    compared = 0
    for name in sorted(set(a) | set(b)):
        if is_timing(name):
            continue
        for step in sorted(set(a.get(name, {})) | set(b.get(name, {}))):
            compared += 1
            if not bitwise_equal(a.get(name, {}).get(step), b.get(name, {}).get(step)):
                diffs.append((name, step))
    if not compared:
        return _check(entry, "determinism", runs[-1], None, 0, "<=", "values", "no metrics to compare")
    first = f"; first at step {diffs[0][1]}: {diffs[0][0]}" if diffs else ""
    return _check(entry, "determinism", runs[-1], float(len(diffs)), 0, "<=", "values",
                  f"{runs[-1]} vs {runs[0]}: {compared - len(diffs)}/{compared} non-timing metric values bitwise "
                  f"equal{first}")


def simulated_run(run_dir: Path) -> bool:
    """The run's manifest says it ran on CPU ranks standing in for the devices (``--simulate``)."""
    try:
        return read(run_dir / "manifest.json", Manifest, "manifest").simulated is not None
    except HarnessError:
        return False


def entry_checks(entry: SuiteEntry, profile: Profile, baseline_path: Path, run_dirs: list[Path], runs: list[str], *,
                 write: bool) -> list[CertCheck]:
    """Every check of one entry from its run directories (``runs``: the same, as certificate paths)."""
    out = [numerics_check(entry, run_dirs[0], runs[0], baseline_path, write=write)]
    if simulated_run(run_dirs[0]):
        out += [_check(entry, name, runs[0], None, None, None, unit, "not applicable: a simulated run (CPU processes "
                       f"stood in for the profile's devices); its {name} is the CPU's")
                for name, unit in (("throughput", "tokens/s/device"), ("mfu", "fraction of peak"), ("memory", "GB"))]
    else:
        out += perf_checks(entry, profile, load_series(run_dirs[0]), runs[0])
    if entry.determinism_repeat:
        out.append(determinism_check(entry, run_dirs, runs))
    if write:
        for d in run_dirs[1:]:  # every run gets its verdict.json (digested like the first's)
            try:
                judge_reference(d, baseline_path, entry.numerics.tier, write=True)
            except HarnessError:
                pass
    return out


def summarize(checks: list[CertCheck]) -> tuple[Summary, str]:
    failed = sum(c.outcome == "fail" for c in checks)
    na = sum(c.outcome == "not-applicable" for c in checks)
    return Summary(checks=len(checks), failed=failed, not_applicable=na), ("fail" if failed else "pass")


def first_difference(recorded: Any, derived: Any, ptr: str = "") -> tuple[str, Any, Any] | None:
    """(pointer, recorded, derived) of the first leaf where two JSON values differ; None when equal."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        for k in list(derived) + [k for k in recorded if k not in derived]:
            if k not in recorded or k not in derived:
                return f"{ptr}/{k}", recorded.get(k, "<absent>"), derived.get(k, "<absent>")
            diff = first_difference(recorded[k], derived[k], f"{ptr}/{k}")
            if diff:
                return diff
        return None
    return None if same_value(recorded, derived) and type(recorded) is type(derived) else (ptr, recorded, derived)


# ----------------------------------------------------------------------------- digests
def input_digests(root: Path, suite_file: Path, profile_file: Path, recipes: list[Path], baselines: list[Path],
                  image_id: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for role, paths in (("suite", [suite_file]), ("profile", [profile_file]), ("recipe", recipes),
                        ("baseline", baselines), ("lock", lock_files(root))):
        for p in paths:
            r = rel(p, root)
            if r not in seen:
                seen.add(r)
                out.append({"role": role, "path": r, "value": None, "sha256": sha256_file(p)})
    if image_id:
        out.append({"role": "image-id", "path": None, "value": image_id, "sha256": sha256_text(image_id)})
    return out


def result_digests(cert_dir: Path, entry_runs: list[tuple[str, list[Path]]]) -> list[dict[str, Any]]:
    """A digest of every file under every run directory (so every file certify leaves is a signed subject)."""
    roles = {name: role for role, name in RESULT_FILES}
    out = []
    for entry_id, dirs in entry_runs:
        for d in dirs:
            for dirpath, dirnames, filenames in os.walk(d):
                dirnames.sort()
                for name in sorted(filenames):
                    path = Path(dirpath) / name
                    role = roles.get(name, "other") if Path(dirpath) == d else "other"
                    out.append({"role": role, "entry": entry_id, "path": rel(path, cert_dir),
                                "sha256": sha256_file(path)})
    return out


# ----------------------------------------------------------------------------- verification
def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) or isinstance(b, float) and isinstance(a, (int, float)):
        return float(a).hex() == float(b).hex()
    return a == b


def package_inputs(inputs: list[DigestInput], root: Path, out: Path) -> None:
    """Copy every input file into ``out/inputs/`` (same relative paths), so the certificate can be verified
    against the files it was made from long after the repository has moved on."""
    for item in inputs:
        if item.path is not None:
            write_bytes_atomic(out / INPUTS_DIR / item.path, (root / item.path).read_bytes())


# ----------------------------------------------------------------------------- verification
@dataclass
class Verification:
    """What verify-certificate found: the problems (empty = contents hold) and how the file is signed."""

    problems: list[str]
    certificate: Certificate | None  # the predicate as its model once it passed its schema (None: it did not)
    signed: bool
    signatures: int  # how many the envelope carries (none of them verified unless ``verified_keyid``)
    verified_keyid: str | None  # the trusted keyid whose signature was checked (None: not checked)
    root: Path  # what the inputs were checked against
    files: int = 0  # files of the directory checked against their signed digests

    @property
    def signature_checked(self) -> bool:
        return self.verified_keyid is not None


def default_root(cert_path: Path) -> Path:
    """The certificate's own copy of its inputs when it has one, else this checkout."""
    packaged = Path(cert_path).resolve().parent / INPUTS_DIR
    return packaged if packaged.is_dir() else ROOT


def verify(cert_path: Path, root: Path | None = None, pubkey: Path | None = None,
           keyid: str | None = None) -> Verification:
    """Every discrepancy of the certificate at ``cert_path`` (see the module docstring). The signature is checked
    when ``keyid`` is given (against ``pubkey``, default the key beside the certificate).

    Raises HarnessError (exit 2) when the file is not a certificate, the keyid is malformed, ``pubkey`` comes
    without a keyid, or the key is unreadable.
    """
    root = Path(root) if root else default_root(cert_path)
    name = str(cert_path)
    opened = open_certificate(Path(cert_path))
    key, key_path, problems = trusted_key(Path(cert_path), pubkey, keyid)
    if not root.is_dir():
        raise HarnessError("repository root not found", file=str(root), key_path="--root", fix="give a checkout")
    doc = opened.statement["predicate"]
    if key is not None:
        problems += signature_problems(opened, key, name, str(key_path))
    verified = key.keyid if key is not None and not problems else None
    result = Verification(problems, None, opened.signed, len(opened.keyids), verified, root)
    errs = schema_errors(doc, "certificate")
    if errs:
        problems += [f"{name}::{ptr}: certificate fails its schema: {msg} (fix: {fix})" for ptr, msg, fix in errs]
        return result
    try:  # only a predicate that passed its schema is read into the model
        cert = Certificate.model_validate(doc)
    except ValidationError as err:
        problems += [f"{name}::{pointer(e['loc'])}: certificate fails its model: {e['msg']}" for e in err.errors()]
        return result
    result.certificate = cert
    if cert.simulated is not None and opened.signed:
        problems.append(f"{name}::/simulated: a simulated certificate is signed; harness never signs one (it "
                        "certifies no hardware): do not trust it as a certificate of the profile")
    problems += subject_problems(opened, cert, name)
    cert_dir = Path(cert_path).resolve().parent
    problems += input_problems(cert, root, cert_dir, name)
    found, file_problems = directory_problems(cert_dir, Path(cert_path).name, expected_files(cert, opened, name))
    problems += file_problems
    result.files = found
    problems += _rederive(cert, root, cert_dir, name)
    return result


def input_problems(cert: Certificate, root: Path, cert_dir: Path, name: str) -> list[str]:
    """The literal inputs (image id) against their digests; the input files against ``root`` unless ``root`` is the
    certificate's own copy (a subject: :func:`harness.judge.attest.directory_problems` checks it)."""
    packaged = root.resolve() == (cert_dir / INPUTS_DIR).resolve()
    out = []
    for i, item in enumerate(cert.inputs):
        if item.path is None:
            if item.value is None or sha256_text(item.value) != item.sha256:
                out.append(f"{name}::/inputs/{i}: digest mismatch for the {item.role} value {item.value!r}")
        elif not packaged:
            out += digest_problem(root, item.path, item.sha256, f"{name}::/inputs/{i}")
    return out


def _system_problems(cert: Certificate, profile: Profile, cert_dir: Path, name: str) -> list[str]:
    """The recorded system block against the one re-derived from the runs' (digested) manifests."""
    manifests = []
    for item in cert.results:
        if item.role == "manifest":
            try:
                manifests.append((item.path, read(cert_dir / item.path, Manifest, "manifest")))
            except HarnessError as err:
                return [f"{name}::/system: cannot re-derive it: {err.one_line()}"]
    if not manifests:
        return [f"{name}::/system: no run manifest to re-derive it from (no run started)"]
    out = [f"{name}::/system: {d}" for d in system_disagreements(manifests)]
    derived = derive_system(profile, [m for _, m in manifests], cert.system.runtime.image)
    diff = first_difference(dump(cert.system), dump(derived), "/system")
    if diff:
        out.append(f"{name}::{diff[0]}: recorded {diff[1]!r}, but the runs' manifests (and the profile) say "
                   f"{diff[2]!r}")
    return out


def _rederive(cert: Certificate, root: Path, cert_dir: Path, name: str) -> list[str]:
    """Checks re-derived from the files; outcomes, summary and result re-derived from the checks."""
    out: list[str] = []
    inputs = {(i.role, i.path) for i in cert.inputs}
    for need in [("suite", cert.suite.path), ("profile", cert.profile.path)]:
        if need not in inputs:
            out.append(f"{name}::/inputs: no digest for the {need[0]} {need[1]}")
    try:
        suite = load_suite_file(root / cert.suite.path, cert.profile.name)
        profile = parse(load_json_strict(root / cert.profile.path), Profile, "profile", cert.profile.path)
    except HarnessError as err:
        return out + [f"{name}::/suite: cannot re-derive the checks: {err.one_line()}"]
    out += _system_problems(cert, profile, cert_dir, name)
    sim = cert.simulated
    by_id = {e.id: e for e in suite.entries if not (sim and e.id in sim.left_out)}
    ran_simulated = any(simulated_run(cert_dir / r) for e in cert.entries for r in e.runs)
    if ran_simulated != (sim is not None):
        out.append(f"{name}::/simulated: the runs' manifests {'do' if ran_simulated else 'do not'} say simulated, "
                   f"the certificate {'does not' if sim is None else 'does'}")
    if [e.id for e in cert.entries] != list(by_id):
        out.append(f"{name}::/entries: entries {[e.id for e in cert.entries]} differ from the suite's "
                   f"{list(by_id)} ({cert.suite.path})")
    derived: list[CertCheck] = []
    for k, e in enumerate(cert.entries):
        entry = by_id.get(e.id)
        if entry is None:
            continue
        ref = entry.numerics.reference_baseline
        if (e.reference_baseline, e.tier, e.recipe, e.scale) != (ref, entry.numerics.tier, entry.recipe,
                                                                 entry.scale):
            out.append(f"{name}::/entries/{k}: recipe, scale, baseline or tier differ from the suite's entry")
        if ("baseline", ref) not in inputs:
            out.append(f"{name}::/entries/{k}: no digest for the reference baseline {ref}")
        if not any(r == "recipe" and p == f"recipes/{entry.recipe}.json" for r, p in inputs):
            out.append(f"{name}::/entries/{k}: no digest for the recipe recipes/{entry.recipe}.json")
        want_runs = 2 if entry.determinism_repeat else 1
        if len(e.runs) != want_runs:
            out.append(f"{name}::/entries/{k}/runs: {len(e.runs)} run(s), the suite asks for {want_runs}")
            continue
        derived += entry_checks(entry, profile, root / ref, [cert_dir / r for r in e.runs], list(e.runs),
                                write=False)
    recorded = cert.checks
    if len(derived) != len(recorded):
        out.append(f"{name}::/checks: {len(recorded)} checks recorded, {len(derived)} re-derived from the runs")
    for i, (c, d) in enumerate(zip(recorded, derived)):
        for key in ("entry", "name", "run", "value", "threshold", "comparison", "outcome"):
            if not same_value(getattr(c, key), getattr(d, key)):
                out.append(f"{name}::/checks/{i}/{key}: {d.entry} {d.name}: recorded {getattr(c, key)!r} but "
                           f"{getattr(d, key)!r} re-derived from {d.run} ({d.detail})")
                break
    for i, c in enumerate(recorded):
        if c.outcome != derive_outcome(c):
            out.append(f"{name}::/checks/{i}/outcome: '{c.outcome}' contradicts value {c.value!r} "
                       f"{c.comparison} threshold {c.threshold!r}")
    summary, result = summarize(recorded)
    if cert.summary != summary:
        out.append(f"{name}::/summary: {dump(cert.summary)} contradicts the checks ({dump(summary)})")
    if cert.result != result:
        out.append(f"{name}::/result: '{cert.result}' contradicts the checks ({summary.failed} failed)")
    return out
