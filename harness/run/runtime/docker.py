"""Run `python -m harness ...` inside a locked image, through the Docker SDK.

The container is sealed: no network (``network_mode="none"``), a read-only root
filesystem with ``noexec`` tmpfs for ``/tmp`` and ``$HOME``, every capability dropped,
``no-new-privileges``, memory, CPU and pid limits, an init process that reaps and
forwards signals, and the non-root user 10001. Only two host paths are visible: the
run directory (read-write at ``/run-dir``) and the recipe file (read-only at
``/recipes/<name>``; not its folder), plus any extra read-only mounts the caller
names. The caller rewrites paths accordingly.

The run directory is made writable for the container user only when the container is
about to start, and only a directory the harness has just created (empty): an existing
directory is never chowned or re-moded, except that of a resumed run already prepared so.

Accelerators: NVIDIA GPUs through a ``DeviceRequest`` (needs the NVIDIA container
runtime on the host); Ascend NPUs through the davinci device nodes and the
driver files Huawei's container guide asks to mount read-only.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import sys
from pathlib import Path
from typing import Any

from harness.devices import DEVICE_KINDS, device_names
from harness.errors import HarnessError

CONTAINER_UID = 10001
CONTAINER_GID = 10001
RUN_DIR = "/run-dir"
RECIPES_DIR = "/recipes"
HOME_DIR = "/home/harness"
LOCK_LABEL = "io.harness.lock-sha256"
SOURCE_LABEL = "io.harness.source-sha256"  # the project files the image carries (see source_digest)
DEVICES = tuple(device_names())

# Huawei's container guide: per-chip nodes plus three management nodes ...
ASCEND_SHARED_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# ... and the host driver, DCMI library and npu-smi, mounted read-only.
ASCEND_DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
)
ASCEND_OPTIONAL_MOUNTS = ("/etc/ascend_install.info",)


def client(timeout: int = 120):
    """A Docker SDK client that has answered a ping, or a HarnessError saying why not."""
    try:
        import docker  # noqa: PLC0415 - optional at import time of the harness
        from docker.errors import DockerException  # noqa: PLC0415
    except ImportError as err:
        raise HarnessError(
            f"the docker Python SDK is not installed ({err})",
            fix="pip install 'docker>=7'",
        ) from err
    try:
        cli = docker.from_env(timeout=timeout)
        cli.ping()
    except DockerException as err:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HarnessError(
            f"no Docker daemon answers at {host} ({reason})",
            fix="start dockerd (images/ci_prepare.sh does) or set DOCKER_HOST",
        ) from err
    return cli


def _get_image(cli, image: str):
    from docker.errors import ImageNotFound  # noqa: PLC0415

    try:
        return cli.images.get(image)
    except ImageNotFound as err:
        raise HarnessError(
            f"image {image} is not present in the local Docker daemon",
            fix="build it with `python -m harness build-image cpu` (or cuda / ascend)",
        ) from err


SOURCE_TREES = ("harness", "recipes/hardware", "schemas")  # what an image carries of the project ...
SOURCE_FILES = ("pyproject.toml", "LICENSE")  # ... and these files at the top


def source_files(repo_root: Path) -> list[Path]:
    """The project files an image carries (its build context copies exactly these): the package,
    the hardware profiles, the schemas, pyproject and licence; caches, bytecode and dotfiles left out."""
    root = Path(repo_root)
    files = [p for tree in SOURCE_TREES for p in (root / tree).rglob("*") if p.is_file()
             and p.suffix != ".pyc" and not any(part == "__pycache__" or part.startswith(".")
                                                 for part in p.relative_to(root).parts)]
    return sorted(files + [root / f for f in SOURCE_FILES if (root / f).is_file()])


def source_digest(repo_root: Path) -> str:
    """SHA-256 over the relative paths and bytes of :func:`source_files`: an image whose label differs
    runs other code than this checkout."""
    root, h = Path(repo_root), hashlib.sha256()
    for path in source_files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def stale_reason(image_labels: dict[str, str], repo_root: Path) -> str | None:
    """Why an image does not run this checkout's code (None when it does)."""
    built = image_labels.get(SOURCE_LABEL)
    if built is None:
        return f"the image has no {SOURCE_LABEL} label (built by an older harness)"
    if built != source_digest(repo_root):
        return f"the image was built from other sources than this checkout ({SOURCE_LABEL} {built[:12]}…)"
    return None


def docker_status(image: str) -> tuple[bool, str]:
    """``(True, image id)`` when a daemon answers and ``image`` exists locally, built from this
    checkout's sources; else ``(False, reason)``."""
    from harness.paths import ROOT

    try:
        cli = client(timeout=30)
        try:
            img = _get_image(cli, image)
        finally:
            cli.close()
        stale = stale_reason((img.attrs.get("Config") or {}).get("Labels") or {}, ROOT)
        if stale is not None:
            return False, f"{image}: {stale}; rebuild it (`nox -s build-image -- cpu`, or cuda / ascend)"
        return True, img.id
    except HarnessError as err:
        return False, err.one_line()
    except Exception as err:  # noqa: BLE001 - any daemon failure is a reason, not a crash
        return False, f"docker: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def image_info(image: str) -> dict[str, Any]:
    """Identity of a local image: id, tags, repo digests, labels and the lock hash label."""
    cli = client(timeout=30)
    try:
        img = _get_image(cli, image)
        attrs = img.attrs
        labels = dict((attrs.get("Config") or {}).get("Labels") or {})
        return {
            "id": img.id,
            "tags": list(img.tags),
            "repo_digests": list(attrs.get("RepoDigests") or []),
            "labels": labels,
            "lock_sha256": labels.get(LOCK_LABEL),
            "created": attrs.get("Created"),
            "size": attrs.get("Size"),
            "architecture": attrs.get("Architecture"),
        }
    finally:
        cli.close()


def _prepare_run_dir(run_dir: Path) -> list[int]:
    """Make ``run_dir`` writable for uid 10001; returns extra groups for the container user.

    A new directory is created here, empty: as root it is handed to 10001 (that directory only,
    nothing under it); otherwise its owner keeps it, it becomes group-writable and setgid, and the
    container user joins its group. An existing directory is used only when it was prepared so
    before (a resumed run) or, for a non-root user, when it is the user's own and empty; anything
    else is refused, never chowned or re-moded.
    """
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(mode=0o755)
        created = True
    except FileExistsError:
        created = False
    except OSError as err:
        raise HarnessError(f"cannot create the run directory ({err.strerror})", file=str(run_dir),
                           fix="choose another --out") from None
    st = os.lstat(run_dir)
    if not stat.S_ISDIR(st.st_mode):
        raise HarnessError("the run directory is not a directory (or is a symbolic link)", file=str(run_dir),
                           fix="choose another --out")
    prepared = st.st_uid == CONTAINER_UID or (st.st_uid == os.geteuid() and st.st_mode & 0o2070 == 0o2070)
    if not created:
        if prepared:
            return [] if st.st_uid == CONTAINER_UID else [st.st_gid]
        if os.geteuid() != 0 and st.st_uid == os.geteuid() and not any(os.scandir(run_dir)):
            os.chmod(run_dir, (st.st_mode & 0o7777) | 0o2070)  # the user's own empty directory
            return [st.st_gid]
        raise HarnessError("an existing directory is not handed to the container user", file=str(run_dir),
                           fix="give a new --out (the harness creates it)")
    if os.geteuid() == 0:
        os.lchown(run_dir, CONTAINER_UID, CONTAINER_GID)
        return []
    os.chmod(run_dir, (st.st_mode & 0o7777) | 0o2070)
    return [st.st_gid]


def default_cpus() -> float:
    """The CPU quota of a container: the cores this process may use."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


def _device_options(devices: str, device_count: int) -> dict[str, Any]:
    if devices not in DEVICES:
        raise HarnessError(
            f"unknown device kind {devices!r}", key_path="devices", fix=f"use one of {', '.join(DEVICES)}"
        )
    container = DEVICE_KINDS[devices].container
    if container == "none":
        return {}
    if container == "nvidia":
        from docker.types import DeviceRequest  # noqa: PLC0415

        count = device_count if device_count > 0 else -1  # -1: all GPUs
        return {"device_requests": [DeviceRequest(count=count, capabilities=[["gpu"]])]}
    # Ascend NPU: davinci0..N-1, or every davinci node of the host when device_count is 0
    if device_count > 0:
        chips = [f"/dev/davinci{i}" for i in range(device_count)]
    else:
        chips = sorted(glob.glob("/dev/davinci[0-9]*"), key=lambda p: int(p[len("/dev/davinci"):]))
        chips = chips or ["/dev/davinci0"]
    nodes = chips + list(ASCEND_SHARED_NODES)
    missing = [n for n in nodes + list(ASCEND_DRIVER_MOUNTS) if not os.path.exists(n)]
    if missing:
        raise HarnessError(
            f"Ascend device or driver path missing on this host: {', '.join(missing)}",
            key_path="devices",
            fix="run on an Ascend host with the NPU driver installed, or lower device_count",
        )
    volumes = {p: {"bind": p, "mode": "ro"} for p in ASCEND_DRIVER_MOUNTS}
    volumes.update({p: {"bind": p, "mode": "ro"} for p in ASCEND_OPTIONAL_MOUNTS if os.path.exists(p)})
    return {"devices": [f"{n}:{n}:rwm" for n in nodes], "_volumes": volumes}


def container_options(
    *,
    image_id: str,
    lock_sha256: str,
    run_dir: Path,
    recipe_file: Path,
    mounts_ro: dict[Path, str] | None = None,
    devices: str = "cpu",
    device_count: int = 0,
    env: dict[str, str] | None = None,
    mem_limit: str = "8g",
    pids_limit: int = 512,
    shm_size: str = "1g",
    cpus: float | None = None,
    group_add: list[int] | None = None,
) -> dict[str, Any]:
    """The keyword arguments for ``containers.create`` that seal a harness container."""
    volumes: dict[str, dict[str, str]] = {
        str(Path(run_dir).resolve()): {"bind": RUN_DIR, "mode": "rw"},
        str(Path(recipe_file).resolve()): {"bind": recipe_target(recipe_file), "mode": "ro"},
    }
    for host, inner in (mounts_ro or {}).items():
        if (inner in (RUN_DIR, RECIPES_DIR, "/", "/tmp", HOME_DIR) or not str(inner).startswith("/")
                or str(inner).startswith(RECIPES_DIR + "/")):
            raise HarnessError(
                f"read-only mount target {inner!r} is reserved or not absolute",
                key_path="mounts_ro",
                fix="mount extra inputs under a new absolute path such as /inputs/<name>",
            )
        volumes[str(Path(host).resolve())] = {"bind": str(inner), "mode": "ro"}
    dev = _device_options(devices, device_count)
    volumes.update(dev.pop("_volumes", {}))
    environment = {
        "HOME": HOME_DIR,
        "TMPDIR": "/tmp",
        "HARNESS_RUNTIME": "docker",
        "HARNESS_IMAGE_ID": image_id,
        "HARNESS_LOCK_SHA256": lock_sha256,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    for key, value in (env or {}).items():
        if key.startswith("HARNESS_") and key in environment:
            raise HarnessError(f"environment variable {key} is set by the runtime", key_path=f"env.{key}")
        environment[key] = str(value)
    uid_gid = f"{CONTAINER_UID}:{CONTAINER_GID}"
    options: dict[str, Any] = {
        "user": uid_gid,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {
            "/tmp": "rw,noexec,nosuid,nodev,size=2g,mode=1777",
            HOME_DIR: f"rw,noexec,nosuid,nodev,size=512m,mode=0700,uid={CONTAINER_UID},gid={CONTAINER_GID}",
        },
        "init": True,
        "nano_cpus": int((cpus if cpus is not None else default_cpus()) * 1e9),
        "volumes": volumes,
        "working_dir": RUN_DIR,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": mem_limit,
        "memswap_limit": mem_limit,  # no swap beyond the memory limit
        "pids_limit": pids_limit,
        "shm_size": shm_size,
        "environment": environment,
        "labels": {"io.harness.role": "run"},
        **dev,
    }
    if group_add:
        options["group_add"] = [str(g) for g in group_add]
    return options


def recipe_target(recipe_file: Path) -> str:
    """Where the recipe file is visible inside the container."""
    return f"{RECIPES_DIR}/{Path(recipe_file).name}"


def run_in_docker(inner_args: list[str], *, image: str, run_dir: Path, recipe_file: Path, **settings: Any) -> int:
    """Run ``python -m harness <inner_args>`` in ``image``; stream its output; return its exit code.

    Paths inside ``inner_args`` must already be container paths (:func:`recipe_target`, ``/run-dir``).
    The run directory is prepared (:func:`_prepare_run_dir`) only after the daemon answered and the
    image was checked, right before the container is created.
    ``settings`` are :func:`container_options`' (devices, device_count, env, mounts_ro, limits).
    The container is removed afterwards, whatever happened.
    """
    run_dir = Path(run_dir)
    recipe_file = Path(recipe_file)
    if not recipe_file.is_file():
        raise HarnessError("recipe file not found", file=str(recipe_file), fix="check the path")
    cli = client()
    container = None
    try:
        img = _get_image(cli, image)
        labels = (img.attrs.get("Config") or {}).get("Labels") or {}
        if not labels.get(LOCK_LABEL):
            raise HarnessError(
                f"image {image} has no {LOCK_LABEL} label, so it is not a harness image",
                fix="build it with `python -m harness build-image cpu` (or cuda / ascend)",
            )
        from harness.paths import ROOT

        stale = stale_reason(labels, ROOT)
        if stale is not None:
            raise HarnessError(f"image {image}: {stale}", fix="rebuild it (`nox -s build-image -- cpu`, or cuda / "
                               "ascend) or run with --runtime local")
        group_add = _prepare_run_dir(run_dir)
        options = container_options(image_id=img.id, lock_sha256=labels[LOCK_LABEL], run_dir=run_dir,
                                    recipe_file=recipe_file, group_add=group_add, **settings)
        # Every harness image's ENTRYPOINT runs `python -m harness` (Ascend's first sources CANN's env).
        container = cli.containers.create(img.id, command=[str(a) for a in inner_args], **options)
        try:
            container.start()
        except Exception as err:  # noqa: BLE001 - report the daemon's reason in one line
            text = str(err).splitlines()[0] if str(err) else type(err).__name__
            fix = "install the NVIDIA container toolkit on the host" if settings.get("devices") == "cuda" else None
            raise HarnessError(f"the container did not start: {text}", fix=fix) from err
        cli.api.timeout = None  # a run can print nothing for longer than any request timeout
        out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else None
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            if out is not None:
                out.write(chunk)
                out.flush()
            else:
                sys.stdout.write(chunk.decode("utf-8", "replace"))
        result = container.wait()
        return int(result.get("StatusCode", 1))
    except KeyboardInterrupt:
        if container is not None:
            try:
                container.kill()
            except Exception:  # noqa: BLE001, S110 - it may have exited already
                pass
        raise
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        cli.close()
