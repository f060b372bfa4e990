"""Build the harness container images: ``harness-cpu``, ``harness-cuda``, ``harness-ascend``.

CPU builds offline: a reproducible Debian base (debootstrap, then ``docker load`` of a
deterministic archive, so its image id is a function of its content and is checked against
``images/cpu/base.lock.json``), plus wheels from a hash-checked local wheelhouse, with every
``RUN`` step network-less. CUDA and Ascend bases come from public registries, so those builds
first check that the daemon can reach them. images/README.md has the details.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import HarnessError
from harness.run.runtime.docker import LOCK_LABEL, SOURCE_LABEL, client, source_digest, source_files

KINDS = ("cpu", "cuda", "ascend")
IMAGE_NAMES = {"cpu": "harness-cpu", "cuda": "harness-cuda", "ascend": "harness-ascend"}
BASE_TAG = "harness-base:bookworm"
SOURCE_MTIME = 1767225600  # 2026-01-01T00:00:00Z: the base's SOURCE_DATE_EPOCH, and staged files' mtime
WHEEL_DIRS_ENV = "HARNESS_WHEEL_DIRS"  # extra local wheel folders (os.pathsep separated)
DEFAULT_WHEEL_DIRS = ("/opt/wheels",)

# What each image's interpreter accepts: used to lock and to download wheels.
TARGETS: dict[str, dict[str, Any]] = {
    "cpu": {"python": "3.11", "python_full": "3.11.2", "arch": "x86_64", "glibc": 36},  # Debian 12
    "cuda": {"python": "3.12", "python_full": "3.12.3", "arch": "x86_64", "glibc": 39},  # Ubuntu 24.04
    "ascend": {"python": "3.11", "python_full": "3.11.0", "arch": "aarch64", "glibc": 39},  # Ubuntu 24.04
}

Log = Callable[[str], None]
_BASE_ARG = re.compile(r"^ARG BASE_IMAGE=(sha256:[0-9a-f]{64})$", re.M)
_LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def platform_args(kind: str) -> list[str]:
    """pip ``--platform/--python-version/--abi`` flags for ``kind``'s interpreter."""
    t = TARGETS[kind]
    arch, py = t["arch"], t["python"].replace(".", "")
    plats = [f"manylinux_2_{m}_{arch}" for m in range(t["glibc"], 16, -1)] + [f"manylinux2014_{arch}"]
    if arch == "x86_64":
        plats += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    args = [a for p in plats for a in ("--platform", p)]
    return args + ["--python-version", t["python"], "--implementation", "cp", "--abi", f"cp{py}",
                   "--only-binary=:all:"]


def wheel_dirs() -> list[str]:
    extra = [d for d in os.environ.get(WHEEL_DIRS_ENV, "").split(os.pathsep) if d]
    return [d for d in (*extra, *DEFAULT_WHEEL_DIRS) if os.path.isdir(d)]


def _kind_dir(kind: str, repo_root: Path) -> Path:
    if kind not in KINDS:
        raise HarnessError(f"unknown image kind {kind!r}", fix=f"use one of {', '.join(KINDS)}")
    return Path(repo_root) / "images" / kind


def image_tag(kind: str) -> str:
    return f"{IMAGE_NAMES[kind]}:{__version__}"


def lock_files(kind: str, repo_root: Path) -> list[Path]:
    """The hash-locked requirement files of ``kind``, in byte order of their names."""
    files = sorted(_kind_dir(kind, repo_root).glob("*.lock"), key=lambda p: p.name.encode())
    if not files:
        raise HarnessError(f"no requirements lock for {kind}", file=f"images/{kind}/requirements.lock",
                           fix=f"run `python images/lock.py {kind}`")
    return files


def lock_sha256(kind: str, repo_root: Path) -> str:
    """sha256 of the lock files concatenated in name order (for CPU: of requirements.lock)."""
    h = hashlib.sha256()
    for path in lock_files(kind, repo_root):
        h.update(path.read_bytes())
    return h.hexdigest()


def parse_lock(path: Path) -> list[tuple[str, str, set[str]]]:
    """``(name, version, {sha256, ...})`` for each requirement of a hash-locked file."""
    out, logical, start = [], "", 0
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if line.startswith("#"):
            line = ""
        if line.endswith("\\"):
            logical, start = logical + line[:-1] + " ", start or n
            continue
        line, start, logical = (logical + line).strip(), start or n, ""
        if not line:
            start = 0
            continue
        m = _LOCK_LINE.match(line)
        hashes = set(_HASH.findall(line))
        if not m or not hashes:
            raise HarnessError(f"line {start} is not `name==version --hash=sha256:...`", file=str(path),
                               fix="regenerate it with images/lock.py")
        start = 0
        out.append((m.group(1), m.group(2), hashes))
    return out


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- wheelhouse


def assemble_wheelhouse(kind: str, repo_root: Path, log: Log = _say) -> Path:
    """Fill ``.cache/wheelhouse/<kind>`` with exactly the locked wheels, hashes checked.

    Files already there with a locked hash are reused, so a second call needs no network.
    """
    dest = Path(repo_root) / ".cache" / "wheelhouse" / kind
    dest.mkdir(parents=True, exist_ok=True)
    lock = _kind_dir(kind, repo_root) / "requirements.lock"
    wanted = parse_lock(lock)
    present = {_sha256_file(p): p for p in dest.glob("*.whl")}
    missing = [(n, v) for n, v, hashes in wanted if not hashes & present.keys()]
    if missing:
        log(f"wheelhouse: fetching {len(missing)} of {len(wanted)} locked wheels into {dest}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
               "--progress-bar", "off", "--dest", str(dest), "-r", str(lock), *platform_args(kind)]
        for d in wheel_dirs():
            cmd += ["--find-links", d]
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        env.pop("PIP_FIND_LINKS", None)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["pip failed"]
            raise HarnessError(f"could not fetch locked wheels: {tail[0]}", file=str(lock),
                               fix="reach PyPI once (pip download fills .cache/wheelhouse), "
                                   f"or put the wheels in a folder named by {WHEEL_DIRS_ENV}")
        present = {_sha256_file(p): p for p in dest.glob("*.whl")}
    keep = set()
    for name, version, hashes in wanted:
        hit = hashes & present.keys()
        if not hit:
            raise HarnessError(f"no wheel for {name}=={version} matches its locked hash", file=str(lock))
        keep.add(present[next(iter(hit))])
    for extra in set(present.values()) - keep:
        extra.unlink()  # a stale wheel would never be installed, but keeps the context honest
    return dest


# --------------------------------------------------------------------------- CPU base


def _base_lock_path(repo_root: Path) -> Path:
    return Path(repo_root) / "images" / "cpu" / "base.lock.json"


def _read_base_lock(repo_root: Path) -> dict[str, Any]:
    try:
        path = _base_lock_path(repo_root)
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as err:
        raise HarnessError(f"not valid JSON: {err}", file="images/cpu/base.lock.json") from err


def _dpkg_packages(rootfs: Path) -> dict[str, str]:
    packages: dict[str, str] = {}
    for stanza in (rootfs / "var/lib/dpkg/status").read_text(encoding="utf-8").split("\n\n"):
        fields = dict(ln.split(": ", 1) for ln in stanza.splitlines() if ": " in ln and not ln.startswith(" "))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            arch = "" if fields.get("Architecture", "all") in ("all", "amd64") else f":{fields['Architecture']}"
            packages[fields["Package"] + arch] = fields["Version"]
    return dict(sorted(packages.items()))


def _normalize_rootfs(rootfs: Path) -> str:
    """Drop what debootstrap leaves that depends on the host or the clock; return the Release date."""
    release_date = ""
    for rel in (rootfs / "var/lib/apt/lists").glob("*_InRelease"):
        for line in rel.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Date: "):
                release_date = line[6:].strip()
                break
    doomed = [rootfs / p for p in ("etc/hostname", "etc/resolv.conf", "etc/machine-id",
                                   "var/cache/ldconfig/aux-cache", "root/.bash_history")]
    doomed += list((rootfs / "var/cache/apt").glob("*.bin"))
    doomed += list((rootfs / "var/cache/apt/archives").glob("*.deb"))
    doomed += [p for p in (rootfs / "var/lib/apt/lists").iterdir() if p.is_file()]
    doomed += [p for p in (rootfs / "var/log").rglob("*") if p.is_file() or p.is_symlink()]
    for path in doomed:
        path.unlink(missing_ok=True)
    for path in (rootfs / "tmp").iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return release_date


def _write_layer(rootfs: Path, out: Path, epoch: int) -> None:
    """A tar of ``rootfs``: sorted names, fixed mtimes, numeric owners, nothing under /dev."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for top, dirs, files in os.walk(rootfs):
            rel_top = os.path.relpath(top, rootfs)
            if rel_top == "dev":
                dirs.clear()
                continue
            dirs.sort()
            for name in sorted([*dirs, *files]):
                full = os.path.join(top, name)
                ti = tf.gettarinfo(full, arcname=os.path.relpath(full, rootfs))
                if ti is None or ti.ischr() or ti.isblk() or ti.isfifo():
                    continue
                ti.mtime, ti.uname, ti.gname = epoch, "", ""
                if ti.isreg():
                    with open(full, "rb") as f:
                        tf.addfile(ti, f)
                else:
                    tf.addfile(ti)


def _image_archive(layer: Path, layer_sha: str, epoch: int, meta: dict[str, Any], out: Path) -> str:
    """Write a ``docker load`` archive for one layer; return the config's sha256 (the image id)."""
    created = _iso(epoch)
    how = (f"debootstrap --variant={meta['variant']} --include={','.join(meta['include'])} "
           f"{meta['suite']} {meta['mirror']}")
    config = {
        "architecture": "amd64", "os": "linux", "created": created,
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
                   "Cmd": ["/bin/bash"], "Labels": {"org.opencontainers.image.description": how}},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_sha}"]},
        "history": [{"created": created, "created_by": "harness.images.build_base (debootstrap)"}],
    }
    raw = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_sha = hashlib.sha256(raw).hexdigest()
    manifest = json.dumps([{"Config": f"{config_sha}.json", "RepoTags": [BASE_TAG],
                            "Layers": [f"{layer_sha}/layer.tar"]}]).encode()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in ((f"{config_sha}.json", raw), ("manifest.json", manifest)):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), epoch
            tf.addfile(ti, io.BytesIO(data))
        ti = tf.gettarinfo(str(layer), arcname=f"{layer_sha}/layer.tar")
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = epoch, 0, 0, "", ""
        with open(layer, "rb") as f:
            tf.addfile(ti, f)
    return config_sha


def build_base(repo_root: Path, *, refresh: bool = False, log: Log = _say) -> dict[str, Any]:
    """Make sure the CPU base with the recorded id is loaded; build it with debootstrap if not.

    ``refresh`` accepts a base whose id differs from ``images/cpu/base.lock.json`` and records
    it (lock file and the CPU Dockerfile's ``ARG BASE_IMAGE``); otherwise a differing id fails.
    """
    repo_root = Path(repo_root)
    lock = _read_base_lock(repo_root)
    cli = client(timeout=600)
    try:
        want = lock.get("image_id")
        if want and not refresh:
            try:
                if cli.images.get(want).id == want:
                    cli.api.tag(want, *BASE_TAG.split(":"))
                    log(f"base: {BASE_TAG} {want} already loaded")
                    return {**lock, "built": False}
            except Exception:  # noqa: BLE001, S110 - not loaded: build below
                pass
        if shutil.which("debootstrap") is None:
            raise HarnessError("debootstrap is not installed", fix="apt-get install -y debootstrap")
        if os.geteuid() != 0:
            raise HarnessError("building the CPU base needs root (debootstrap)", fix="run as root")
        meta = {"suite": lock.get("suite", "bookworm"), "variant": lock.get("variant", "minbase"),
                "include": lock.get("include", ["python3", "python3-venv"]),
                "mirror": lock.get("mirror", "http://deb.debian.org/debian"),
                "source_date_epoch": int(lock.get("source_date_epoch", SOURCE_MTIME))}
        epoch = meta["source_date_epoch"]
        work = repo_root / ".cache" / "base-build"
        debs = repo_root / ".cache" / "debootstrap"  # downloaded .debs, kept between builds
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        debs.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        rootfs = work / "rootfs"
        cmd = ["debootstrap", f"--variant={meta['variant']}", f"--include={','.join(meta['include'])}",
               f"--cache-dir={debs}", meta["suite"], str(rootfs), meta["mirror"]]
        log(f"base: {' '.join(cmd)}")
        proc = subprocess.run(cmd, env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C"},
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["debootstrap failed"]
            raise HarnessError(f"debootstrap failed: {tail[0]}", fix=f"check that {meta['mirror']} is reachable")
        release_date = _normalize_rootfs(rootfs)
        packages = _dpkg_packages(rootfs)
        layer = work / "layer.tar"
        _write_layer(rootfs, layer, epoch)
        layer_sha = _sha256_file(layer)
        shutil.rmtree(rootfs)
        archive = work / "image.tar"
        config_sha = _image_archive(layer, layer_sha, epoch, meta, archive)
        layer.unlink()
        with open(archive, "rb") as f:
            cli.images.load(f)
        image_id = cli.images.get(BASE_TAG).id
        shutil.rmtree(work, ignore_errors=True)
        if image_id != f"sha256:{config_sha}":
            raise HarnessError(f"docker loaded {image_id}, expected sha256:{config_sha}")
        record = {"tag": BASE_TAG, "image_id": image_id, "layer_diff_id": f"sha256:{layer_sha}",
                  **meta, "debian_release_date": release_date, "packages": packages}
        seconds = round(time.monotonic() - started, 1)
        log(f"base: built {image_id} in {seconds}s ({len(packages)} packages)")
        if want and want != image_id and not refresh:
            old = lock.get("packages", {})
            changed = sorted(f"{p} {old.get(p, '-')} -> {packages.get(p, '-')}"
                             for p in set(old) | set(packages) if old.get(p) != packages.get(p))
            raise HarnessError(
                f"the rebuilt base is {image_id}, the lock records {want}; "
                f"package changes: {', '.join(changed[:8]) or 'none (file content differs)'}",
                file="images/cpu/base.lock.json",
                fix="review, then `python -m harness build-image cpu --refresh-base` and commit the lock",
            )
        if want != image_id:
            _write_json_atomic(_base_lock_path(repo_root), record)
            _pin_dockerfile(repo_root, image_id)
            log(f"base: recorded {image_id} in images/cpu/base.lock.json and images/cpu/Dockerfile")
        return {**record, "built": True, "build_seconds": seconds}
    finally:
        cli.close()


def _pin_dockerfile(repo_root: Path, image_id: str) -> None:
    path = _kind_dir("cpu", repo_root) / "Dockerfile"
    text = path.read_text(encoding="utf-8")
    new, n = _BASE_ARG.subn(f"ARG BASE_IMAGE={image_id}", text)
    if n != 1:
        raise HarnessError("expected exactly one `ARG BASE_IMAGE=sha256:...` line", file=str(path))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- images


def _git(repo_root: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo_root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def provenance(repo_root: Path) -> dict[str, str]:
    """OCI label values: source, revision (``-dirty`` if tracked files changed), created, version.

    ``created`` is the commit time for a clean tree (so rebuilding a commit reuses every cached
    layer and keeps the image id), else the build time.
    """
    revision, created = _git(repo_root, "rev-parse", "HEAD") or "unknown", _iso(time.time())
    if revision != "unknown":
        if _git(repo_root, "status", "--porcelain", "--untracked-files=no"):
            revision += "-dirty"
        elif stamp := _git(repo_root, "log", "-1", "--format=%ct"):
            created = _iso(int(stamp))
    source = os.environ.get("HARNESS_SOURCE_URL") or _git(repo_root, "remote", "get-url", "origin") or "local"
    return {"SOURCE": source, "REVISION": revision, "CREATED": created, "VERSION": __version__}


def stage_context(kind: str, repo_root: Path, wheelhouse: Path | None) -> Path:
    """A minimal build context: Dockerfile, lock files, the project source, the wheelhouse."""
    repo_root = Path(repo_root)
    ctx = repo_root / ".cache" / "image-context" / kind
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    kdir = _kind_dir(kind, repo_root)
    shutil.copy2(kdir / "Dockerfile", ctx / "Dockerfile")
    for lock in lock_files(kind, repo_root):
        shutil.copy2(lock, ctx / lock.name)
    src = ctx / "src"
    for path in source_files(repo_root):  # the files the image's source digest covers, no more
        dst = src / path.relative_to(repo_root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dst)
    for path in [src, *src.rglob("*")]:  # fixed mtimes keep the builder's COPY cache valid
        os.utime(path, (SOURCE_MTIME, SOURCE_MTIME), follow_symlinks=False)
    if wheelhouse is not None:
        (ctx / "wheelhouse").mkdir()
        for whl in sorted(wheelhouse.glob("*.whl")):
            try:
                os.link(whl, ctx / "wheelhouse" / whl.name)
            except OSError:
                shutil.copy2(whl, ctx / "wheelhouse" / whl.name)
    return ctx


def base_refs(dockerfile: Path, build_args: dict[str, str] | None = None) -> list[str]:
    """Image references the Dockerfile builds FROM (build args, else ARG defaults; stages left out)."""
    args: dict[str, str] = dict(build_args or {})
    stages: set[str] = set()
    refs: list[str] = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].upper() == "ARG" and "=" in parts[1]:
            k, v = parts[1].split("=", 1)
            args.setdefault(k, v.strip('"'))
        elif len(parts) >= 2 and parts[0].upper() == "FROM":
            words = [p for p in parts[1:] if not p.startswith("--")]
            ref = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), words[0])
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2])
            if ref not in stages and ref not in refs:
                refs.append(ref)
    return refs


def _check_registry(cli, refs: list[str], kind: str) -> None:
    for ref in refs:
        try:
            cli.images.get(ref)
            continue  # already pulled or loaded
        except Exception:  # noqa: BLE001, S110 - not local: ask the registry
            pass
        try:
            cli.api.inspect_distribution(ref)
        except Exception as err:  # noqa: BLE001 - any failure means we cannot build here
            reason = (getattr(err, "explanation", None) or str(err) or type(err).__name__).splitlines()[0][:160]
            raise HarnessError(
                f"cannot build {kind}: the base {ref} is not loaded and its registry is not reachable "
                f"from this Docker daemon ({reason})",
                file=f"images/{kind}/Dockerfile",
                fix="build on a machine that reaches the registry, or `docker load` the base image first",
            ) from err


def _forget_previous(cli, built_json: Path, new_id: str) -> None:
    """Remove the previously recorded image when the new build left it without a tag."""
    try:
        old = json.loads(built_json.read_text(encoding="utf-8")).get("image_id")
        if old and old != new_id and not cli.images.get(old).tags:
            cli.images.remove(old)
    except Exception:  # noqa: BLE001, S110 - nothing recorded, already gone, or still in use
        pass


def build_image(kind: str, *, repo_root: Path, refresh_base: bool = False, build_args: dict[str, str] | None = None,
                log: Log = _say) -> dict[str, Any]:
    """Build and tag ``harness-<kind>:<version>``; record its id and lock hash in ``images/<kind>/built.json``.

    ``build_args`` (cuda / ascend) override Dockerfile ARGs such as ``CANN_IMAGE`` or
    ``FLASH_ATTN_CUDA_ARCHS``; an ``*_IMAGE`` value must be pinned ``name:tag@sha256:<digest>``.
    """
    repo_root = Path(repo_root)
    kdir = _kind_dir(kind, repo_root)
    extra = dict(build_args or {})
    for key, value in extra.items():
        if kind == "cpu" or key in ("LOCK_SHA256", "SOURCE", "REVISION", "CREATED", "VERSION"):
            raise HarnessError(f"build argument {key} cannot be set for {kind}", key_path=f"--build-arg {key}",
                               fix="the cpu base comes from images/cpu/base.lock.json; provenance is computed")
        if key.endswith("_IMAGE") and not re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", value):
            raise HarnessError(f"{key}={value} is not pinned by digest", key_path=f"--build-arg {key}",
                               fix="use name:tag@sha256:<digest>")
    started = time.monotonic()
    lock_hash = lock_sha256(kind, repo_root)
    _ = [parse_lock(path) for path in lock_files(kind, repo_root)]  # every line hashed, or an error now
    buildargs = {**extra, **provenance(repo_root), "LOCK_SHA256": lock_hash}
    base_record: dict[str, Any] = {}
    wheelhouse = None
    if kind == "cpu":
        base_record = build_base(repo_root, refresh=refresh_base, log=log)
        buildargs["BASE_IMAGE"] = base_record["image_id"]
        wheelhouse = assemble_wheelhouse(kind, repo_root, log=log)
    cli = client(timeout=3600)
    try:
        if kind != "cpu":
            _check_registry(cli, base_refs(kdir / "Dockerfile", extra), kind)
        ctx = stage_context(kind, repo_root, wheelhouse)
        tag = image_tag(kind)
        log(f"image: building {tag} from {ctx}")
        image_id = None
        stream = cli.api.build(path=str(ctx), tag=tag, buildargs=buildargs, rm=True, forcerm=True,
                               pull=False, decode=True, network_mode="none" if kind == "cpu" else None,
                               labels={SOURCE_LABEL: source_digest(repo_root)})
        for chunk in stream:
            if "error" in chunk:
                raise HarnessError(f"docker build failed: {chunk['error'].strip()}", file=f"images/{kind}/Dockerfile")
            if "stream" in chunk and chunk["stream"].strip():
                log("  " + chunk["stream"].rstrip())
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
        img = cli.images.get(tag)
        label = (img.attrs["Config"].get("Labels") or {}).get(LOCK_LABEL)
        if (image_id and img.id != image_id) or label != lock_hash:
            raise HarnessError(f"{tag} is {img.id} with lock label {label}; expected {image_id}, {lock_hash}")
        shutil.rmtree(ctx, ignore_errors=True)
        record = {"kind": kind, "tag": tag, "image_id": img.id, "lock_sha256": lock_hash,
                  "base_image_id": base_record.get("image_id"), "revision": buildargs["REVISION"],
                  "created": buildargs["CREATED"], "size_bytes": img.attrs.get("Size"),
                  "build_seconds": round(time.monotonic() - started, 1)}
        _forget_previous(cli, kdir / "built.json", img.id)
        _write_json_atomic(kdir / "built.json", record)
        log(f"image: {tag} = {img.id} ({(record['size_bytes'] or 0) / 1e6:.0f} MB, {record['build_seconds']}s)")
        return record
    finally:
        cli.close()
