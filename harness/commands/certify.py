"""`harness certify PROFILE`: check the machine, run the profile's suite, write a self-verifying certificate.

Order: profile + suite + every entry resolved, its reference baseline loaded and checked against the
recipe, safety pre-flight, the live machine compared with the profile (device model, count, memory,
driver and CUDA / CANN versions) — any problem refuses here, before a run directory exists (exit 2;
safety findings exit 1). Then each entry runs (twice with a determinism repeat) inside the pinned
image with ``--image``, else in this process or under torchrun as the recipe's world size needs, and
is judged (:mod:`harness.judge.certify`). Written into ``--out`` (a new or empty directory): ``runs/``
(every file the runs left, less the replay archives and checkpoints they keep to train on), ``inputs/``
(a copy of every input file), ``system-description.json`` (MLPerf's system description fields;
:mod:`harness.mlperf`), ``certificate.html``, then ``certificate.json`` (an in-toto Statement whose
subjects are all of those files, in a DSSE envelope signed with ``--key``, or the bare Statement,
UNSIGNED, without it; :mod:`harness.judge.attest`) and, when signed, the public half of the key
(``signing-key.pub.pem``; readers trust it only through the keyid printed here). The ``system`` block is
derived from what the runs' manifests recorded, so verification can re-derive it. A ``--key`` that cannot be
used refuses before anything runs. Exit 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import __version__
from harness.config.typed_files import Profile
from harness.errors import EXIT_FINDINGS, EXIT_OK, HarnessError, shown
from harness.jsonio import write_bytes_atomic, write_json_atomic, write_text_atomic
from harness.judge.attest import PUBLIC_KEY_FILE, load_signer, public_pem, sha256_regular, sign, statement
from harness.judge.certify import (
    CERT_FILE,
    HTML_FILE,
    baseline_profile,
    derive_system,
    entry_checks,
    input_digests,
    load_suite,
    package_inputs,
    rel,
    result_digests,
    summarize,
    system_disagreements,
)
from harness.judge.pages import render
from harness.mlperf import SYSTEM_DESC_FILE, system_description
from harness.paths import PROFILES_DIR, ROOT
from harness.records.base import dump, parse, read
from harness.records.certificate import CertCheck, Certificate, SuiteEntry
from harness.records.run import Manifest

if TYPE_CHECKING:
    from harness.config.recipe import Resolved

HELP = "Certify this machine against a hardware profile: run its suite, write a self-verifying certificate."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", metavar="PROFILE", help="hardware profile (recipes/hardware/PROFILE.json); its suite is "
                   "recipes/certification/PROFILE.json")
    p.add_argument("--image", help="run the suite inside this pinned container image (docker); default: this "
                   "process, or torchrun when a recipe needs several processes")
    p.add_argument("--out", type=Path, help="certificate directory (default: runs/certify-<profile>-<utc time>/)")
    p.add_argument("--key", type=Path, help="sign the certificate with this ed25519 private key (`harness keygen`); "
                   "without it the certificate is written UNSIGNED")
    p.add_argument("--quiet", action="store_true", help="no training progress output")
    p.add_argument("--simulate", action="store_true", help="run the suite's smoke entries with the profile's layout "
                   "as CPU processes on this machine (harness run --simulate): a certificate that says SIMULATED on "
                   "every page, is never signed, and certifies no hardware; other scales are left out")


@dataclass(frozen=True)
class Plan:
    """One suite entry resolved: what certify runs for it."""

    entry: SuiteEntry
    res: Resolved
    steps: int
    baseline: Path  # the reference baseline file
    world: int  # training processes
    runs: int  # 2 with a determinism repeat
    replay: Path | None  # the tier is replay: the runs replay this baseline's recorded rollouts


SIMULATED_SCALE = "smoke"  # what CPU processes can run of a suite
SIMULATED_STATEMENT = ("SIMULATED: CPU processes on one machine stood in for the profile's devices (gloo for its "
                       "collective backend). It shows that the profile's layout executes and trains what the reference "
                       "trains; it certifies nothing about the hardware, and is never signed.")


def _plan(entry: SuiteEntry, profile: Profile, simulate: bool = False) -> Plan:
    """Resolve one entry and refuse (exit 2) what could not be certified, before anything runs."""
    from harness.config.recipe import resolve
    from harness.config.safety.check import preflight
    from harness.judge.baseline import load_baseline
    from harness.judge.tiers import REPLAY

    res = resolve(entry.recipe, profile.name, entry.scale)
    ref = entry.numerics.reference_baseline
    path = ROOT / ref
    if not path.is_file():
        src = baseline_profile(entry) or profile.name
        raise HarnessError(f"reference baseline of entry '{entry.id}' is missing", file=ref,
                           fix=f"record it on a {src} machine: harness record-baseline {entry.recipe} "
                               f"--profile {src} --scale {entry.scale} --seeds 3")
    baseline = load_baseline(path)
    if baseline.recipe.hash != res.recipe_hash:
        raise HarnessError(f"reference baseline was recorded for another version of recipe '{entry.recipe}'",
                           file=ref, key_path="/recipe/hash",
                           fix="re-record the baseline for the current recipe (compare refuses stale baselines)")
    t = res.spec.trainer
    if t.nnodes > profile.nodes:
        raise HarnessError(f"entry '{entry.id}' needs {t.nnodes} nodes; the profile describes "
                           f"{profile.nodes}", key_path=f"entries/{entry.id}",
                           fix="certify it on a multi-node allocation or drop it from the suite")
    preflight(res)
    if simulate:
        from harness.run.simulate import simulated

        res = simulated(res)
    steps = int(entry.steps or t.total_training_steps)
    if entry.numerics.tier == REPLAY.name:
        if baseline.replay is None:
            raise HarnessError(f"entry '{entry.id}' asks for the replay tier but its reference baseline has no "
                               "recorded rollouts", file=ref, fix="name a baseline recorded with rollouts")
        steps = min(steps, baseline.steps)
    return Plan(entry, res, steps, path, t.nnodes * t.n_gpus_per_node, 2 if entry.determinism_repeat else 1,
                path if entry.numerics.tier == REPLAY.name else None)


def _runtime(image: str | None, plans: list[Plan]) -> tuple[str, str | None, str | None]:
    """(runtime kind, image ref, image id)."""
    if image:
        from harness.run.runtime.docker import docker_status

        ok, info = docker_status(image)
        if not ok:
            raise HarnessError(f"image {image} is not usable: {info}", key_path="--image",
                               fix="build it (`harness build-image cpu|cuda|ascend`) or load it into the daemon")
        return "docker", image, info
    return ("torchrun" if any(p.world > 1 for p in plans) else "local"), None, None


def _train(plan: Plan, run_dir: Path, runtime: str, image: str | None, quiet: bool) -> None:
    from harness.run.plan import RunPlan
    from harness.run.runtime.launch import choose_runtime, train_stage

    kind = runtime if runtime == "docker" or plan.world > 1 else "local"
    kind, img = choose_runtime(kind, plan.res, image) if plan.res.simulation is None else (kind, None)
    train_stage(RunPlan(recipe=plan.res.path, res=plan.res, run_dir=run_dir, runtime=kind, image=img,
                        steps=plan.steps, quiet=quiet, replay=plan.replay, simulated=plan.res.simulation is not None))


def _command(args: argparse.Namespace) -> str:
    parts = ["harness", "certify", args.profile]
    if args.image:
        parts += ["--image", args.image]
    if args.out:
        parts += ["--out", str(args.out)]
    if args.key:
        parts += ["--key", Path(args.key).name]
    if args.simulate:
        parts.append("--simulate")
    return " ".join(parts)


def execute(args: argparse.Namespace) -> int:
    from harness.config.profiles import load_profile, mismatches, probe_machine
    from harness.run.rundir import git_revision, utc_now

    if os.environ.get("HARNESS_FAULT"):
        raise HarnessError("HARNESS_FAULT is set; a certificate must not be produced with a fault injected",
                           key_path="HARNESS_FAULT", fix="unset HARNESS_FAULT")
    if args.simulate and (args.key or args.image):
        raise HarnessError("a simulated certificate is never signed and runs no container", key_path="--key"
                           if args.key else "--image", fix="drop --key / --image, or certify on the profile's hardware")
    signer = load_signer(args.key) if args.key else None
    profile_doc = load_profile(args.profile)  # checked by its schema
    profile = Profile.model_validate(profile_doc)
    suite_file, suite = load_suite(args.profile)
    machine = probe_machine()
    bad = [] if args.simulate else mismatches(profile_doc, machine)
    if bad:
        raise HarnessError(f"this machine does not match profile '{args.profile}' ({len(bad)} mismatch"
                           f"{'es' if len(bad) > 1 else ''}): " + "; ".join(bad), key_path="PROFILE",
                           fix="certify on the profile's hardware and software (`harness probe` shows this machine)")
    left_out = [e.id for e in suite.entries if args.simulate and e.scale != SIMULATED_SCALE]
    plans = [_plan(e, profile, args.simulate) for e in suite.entries if e.id not in left_out]
    if not plans:
        raise HarnessError(f"suite {suite_file} has no {SIMULATED_SCALE} entry to simulate", key_path="--simulate",
                           fix="certify on the profile's hardware")
    runtime, image, _ = _runtime(args.image, plans)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out or Path("runs") / f"certify-{args.profile}-{stamp}")
    if out.is_symlink() or out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HarnessError("is not a new or empty directory: every file of a certificate directory must be one "
                           "the certificate signs", file=str(out), key_path="--out", fix="choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    checks: list[CertCheck] = []
    entries, entry_runs = [], []
    manifests: list[tuple[str, Manifest]] = []
    for plan in plans:
        entry = plan.entry
        dirs = [out / "runs" / entry.id / f"run-{k + 1}" for k in range(plan.runs)]
        for k, d in enumerate(dirs):
            print(f"certify {args.profile}: {entry.id} run {k + 1}/{len(dirs)} ({plan.steps} steps, "
                  f"{runtime}) -> {d}", file=sys.stderr, flush=True)
            try:
                _train(plan, d, runtime, image, args.quiet)
            except HarnessError as err:  # a failed run fails its checks; the certificate says so
                print(f"warning: {entry.id} run {k + 1} failed: {err.one_line()}", file=sys.stderr)
        manifests += [(rel(d, out), read(d / "manifest.json", Manifest, "manifest")) for d in dirs
                      if (d / "manifest.json").is_file()]
        runs = [rel(d, out) for d in dirs]
        checks += entry_checks(entry, profile, plan.baseline, dirs, runs, write=True)
        entries.append({"id": entry.id, "recipe": entry.recipe, "scale": entry.scale, "steps": plan.steps,
                        "reference_baseline": entry.numerics.reference_baseline, "tier": entry.numerics.tier,
                        "runs": runs})
        entry_runs.append((entry.id, dirs))
    if not manifests:
        raise HarnessError("no run of the suite started, so there is nothing to certify", file=str(out),
                           fix="read the warnings above", exit_code=EXIT_FINDINGS)
    disagree = system_disagreements(manifests)
    if disagree:
        raise HarnessError("the runs did not all run on one system: " + "; ".join(disagree), file=str(out),
                           fix="certify on one machine and software stack", exit_code=EXIT_FINDINGS)
    drop_training_state([d for _, dirs in entry_runs for d in dirs])
    system = derive_system(profile, [m for _, m in manifests], image)
    summary, result = summarize(checks)
    recipes = sorted({Path(p.res.path).resolve() for p in plans})
    doc: dict[str, Any] = {
        "schema_version": 1, "created_utc": utc_now(), "command": _command(args),
        "harness": {"version": __version__, **git_revision()},
        "profile": {"name": profile.name, "path": rel(PROFILES_DIR / f"{profile.name}.json", ROOT),
                    "description": profile.description},
        "suite": {"path": rel(suite_file, ROOT), "notes": list(suite.notes)},
        "system": dump(system), "entries": entries, "checks": [dump(c) for c in checks],
        "inputs": input_digests(ROOT, suite_file, PROFILES_DIR / f"{profile.name}.json", recipes,
                                sorted({p.baseline for p in plans}), system.runtime.image_id),
        "results": result_digests(out, entry_runs), "summary": dump(summary), "result": result,
        **({"simulated": {"statement": SIMULATED_STATEMENT, "left_out": left_out}} if args.simulate else {}),
    }
    cert = parse(doc, Certificate, "certificate", str(out / CERT_FILE))  # its schema, then written through its model
    write_certificate(out, cert, signer)
    for c in checks:
        print(shown(f"  {c.outcome.upper():>4}  {c.entry}  {c.name}: {c.detail}"))
    print(shown(f"{'SIMULATED ' if args.simulate else ''}{result.upper()} certification of {args.profile}: "
                f"{summary.checks - summary.failed}/"
                f"{summary.checks} checks passed ({summary.not_applicable} not applicable); "
                f"certificate: {out / CERT_FILE}"))
    if signer:
        keyid = signer.public_key.keyid
        print(shown(f"signed with keyid {keyid} ({args.key}; its public half: {out / PUBLIC_KEY_FILE}); publish "
                    f"the keyid apart from the certificate (your site, a release): readers verify with "
                    f"`harness verify-certificate {out / CERT_FILE} --keyid {keyid}`"))
    elif args.simulate:
        print(f"notice: {SIMULATED_STATEMENT}" + (f" Left out: {', '.join(left_out)}." if left_out else ""),
              file=sys.stderr)
    else:
        print("warning: the certificate is UNSIGNED: anyone can edit it and recompute its digests; sign it with "
              "--key (make a key with `harness keygen --out DIR`)", file=sys.stderr)
    return EXIT_OK if result == "pass" else EXIT_FINDINGS


def drop_training_state(run_dirs: list[Path]) -> None:
    """Remove what the runs kept to train on, not as evidence: the replay archives (``rollouts/``: the initial
    policy and every step's rollouts, kept for recording a baseline) and any checkpoint. The checks read the
    manifest, metrics, verdict and MLPerf log; every file left is digested and signed."""
    import shutil

    from harness.core.replay import STEP_DIR
    from harness.run.checkpoint import CKPT_DIR

    for d in run_dirs:
        for name in (STEP_DIR, CKPT_DIR):
            if (d / name).is_dir() and not (d / name).is_symlink():
                shutil.rmtree(d / name)


def write_certificate(out: Path, cert: Certificate, signer: Any = None) -> None:
    """Everything of a certificate beside its runs: the copy of the inputs (verifiable against these even after
    the repository moves on), the system description and the page (written from ``cert``), then
    ``certificate.json``, whose Statement names every one of those files and every run file as a subject,
    signed by ``signer`` (bare, UNSIGNED, without), and the signer's public key."""
    package_inputs(cert.inputs, ROOT, out)
    write_json_atomic(out / SYSTEM_DESC_FILE, system_description(cert))
    write_text_atomic(out / HTML_FILE, render_html(cert))
    stmt = statement(cert, [(name, sha256_regular(out / name)) for name in (SYSTEM_DESC_FILE, HTML_FILE)])
    write_json_atomic(out / CERT_FILE, sign(stmt, signer) if signer else stmt)
    if signer:
        write_bytes_atomic(out / PUBLIC_KEY_FILE, public_pem(signer))


# ----------------------------------------------------------------------------- HTML
def render_html(doc: Certificate | dict[str, Any]) -> str:
    """The certificate's page (a document is read into its model first)."""
    cert = doc if isinstance(doc, Certificate) else Certificate.model_validate(doc)
    s = cert.system
    acc, host, rt = s.accelerator, s.host, s.runtime
    system = [
        ("Accelerator", f"{acc.count} x {acc.vendor} {acc.model} ({acc.memory_gb} GB, peak "
                        f"{acc.peak_bf16_tflops} bf16 TFLOP/s)"),
        ("Nodes", s.nodes), ("Host", f"{host.cpu_cores} cores, {host.memory_gb} GB ({host.hostname})"),
        ("Interconnect", f"intra-node: {s.interconnect.intra_node}; inter-node: {s.interconnect.inter_node}"),
        ("Collective backend", s.collective_backend),
        ("Software", ", ".join(f"{k} {v}" for k, v in s.software.items() if v is not None)),
        ("Runtime", f"{rt.kind}" + (f", image {rt.image} ({rt.image_id})" if rt.image else "")),
    ]
    return render("certificate.html.j2", title=f"Certificate: {cert.profile.name}", doc=cert, system=system,
                  cert_file=CERT_FILE)
