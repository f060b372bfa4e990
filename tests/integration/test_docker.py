"""The sealed container that `harness run --runtime docker` uses, checked from inside.

Needs a Docker daemon and the CPU image (`python -m harness build-image cpu`, which
images/ci_prepare.sh runs). Without them these tests skip with the reason, unless
HARNESS_REQUIRE_DOCKER=1 or CI=true (CI prepares the image), where a missing daemon or image is a failure.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from harness.images import image_tag
from harness.run.runtime import docker as rt

pytestmark = [pytest.mark.integration, pytest.mark.docker]

IMAGE = os.environ.get("HARNESS_TEST_IMAGE", image_tag("cpu"))

PROBE = textwrap.dedent(
    """
    import json, os, socket
    out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
    out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=3).close()
        out["connect"] = "connected"
    except OSError as err:
        out["connect"] = type(err).__name__ + ": " + str(err)
    try:
        socket.getaddrinfo("pypi.org", 443)
        out["dns"] = "resolved"
    except OSError as err:
        out["dns"] = type(err).__name__
    writes = {}
    for d in ("/", "/recipes", "/home", "/opt/venv", "/etc", "/run-dir", "/tmp", os.environ["HOME"]):
        path = os.path.join(d, "probe-write")
        try:
            with open(path, "w") as f:
                f.write("x")
            writes[d] = "ok"
        except OSError as err:
            writes[d] = type(err).__name__ + ": " + (err.strerror or "")
    out["writes"] = writes
    status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    out["cap_eff"] = status["CapEff"].strip()
    out["no_new_privs"] = status.get("NoNewPrivs", "").strip()
    out["env"] = {k: v for k, v in os.environ.items() if k.startswith("HARNESS_")}
    out["recipe"] = open("/recipes/r.json").read()
    print("PROBE " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def image_id() -> str:
    ok, detail = rt.docker_status(IMAGE)
    if not ok:
        if os.environ.get("HARNESS_REQUIRE_DOCKER") == "1" or os.environ.get("CI") == "true":
            pytest.fail(f"CI / HARNESS_REQUIRE_DOCKER=1 needs the CPU image, but {detail}")
        pytest.skip(detail)
    return detail


@pytest.fixture()
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    run_dir = tmp_path / "run"
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "r.json").write_text('{"seed": 1}\n')
    return run_dir, recipes / "r.json"


def _probe(image_id: str, run_dir: Path, recipes: Path, code: str = PROBE) -> tuple[dict, dict]:
    """Run ``code`` under exactly the options run_in_docker uses; return its PROBE report and HostConfig."""
    groups = rt._prepare_run_dir(run_dir)
    info = rt.image_info(IMAGE)
    opts = rt.container_options(image_id=image_id, lock_sha256=info["lock_sha256"], run_dir=run_dir,
                                recipe_file=recipes, group_add=groups)
    cli = rt.client()
    container = cli.containers.create(image_id, entrypoint=["python", "-c", code], **opts)
    try:
        container.reload()
        host_config = container.attrs["HostConfig"]
        container.start()
        status = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode()
        assert status == 0, logs
        line = next(ln for ln in logs.splitlines() if ln.startswith("PROBE "))
        return json.loads(line[6:]), host_config
    finally:
        container.remove(force=True)
        cli.close()


def test_no_network(image_id, dirs):
    report, host = _probe(image_id, *dirs)
    assert host["NetworkMode"] == "none"
    assert report["interfaces"] == ["lo"]
    assert report["connect"] != "connected"
    assert report["dns"] != "resolved"


def test_writes_only_to_run_dir_and_tmpfs(image_id, dirs):
    run_dir, _ = dirs
    report, host = _probe(image_id, *dirs)
    writes = report["writes"]
    for path in ("/", "/recipes", "/home", "/opt/venv", "/etc"):
        assert writes[path] != "ok", f"{path} should be read-only: {writes}"
        assert "Read-only file system" in writes[path] or "Permission denied" in writes[path]
    assert writes["/run-dir"] == "ok"
    assert (run_dir / "probe-write").read_text() == "x"  # visible on the host
    assert writes["/tmp"] == "ok" and writes["/home/harness"] == "ok"  # tmpfs, gone afterwards
    assert host["ReadonlyRootfs"] is True
    assert set(host["Tmpfs"]) == {"/tmp", "/home/harness"}


def test_unprivileged_user_and_limits(image_id, dirs):
    report, host = _probe(image_id, *dirs)
    assert report["uid"] == rt.CONTAINER_UID and report["gid"] == rt.CONTAINER_GID
    assert int(report["cap_eff"], 16) == 0
    assert report["no_new_privs"] == "1"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 512
    assert host["Memory"] == 8 * 1024**3


def test_runtime_identity_in_env(image_id, dirs):
    report, _ = _probe(image_id, *dirs)
    info = rt.image_info(IMAGE)
    assert report["env"]["HARNESS_RUNTIME"] == "docker"
    assert report["env"]["HARNESS_IMAGE_ID"] == image_id == info["id"]
    assert report["env"]["HARNESS_LOCK_SHA256"] == info["lock_sha256"]
    assert len(info["lock_sha256"]) == 64
    assert report["recipe"] == "{\"seed\": 1}\n"


def test_image_labels(image_id):
    info = rt.image_info(IMAGE)
    labels = info["labels"]
    for key in ("source", "revision", "created", "version", "base.digest"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    base_lock = json.loads((Path(__file__).resolve().parents[2] / "images/cpu/base.lock.json").read_text())
    assert labels["org.opencontainers.image.base.digest"] == base_lock["image_id"]


def test_run_in_docker_streams_and_returns_exit_code(image_id, dirs, capfd):
    run_dir, recipes = dirs
    assert rt.run_in_docker(["--version"], image=IMAGE, run_dir=run_dir, recipe_file=recipes) == 0
    assert "harness" in capfd.readouterr().out
    code = rt.run_in_docker(["no-such-command"], image=IMAGE, run_dir=run_dir, recipe_file=recipes)
    assert code == 2
    cli = rt.client()
    try:
        leftover = cli.containers.list(all=True, filters={"label": "io.harness.role=run"})
    finally:
        cli.close()
    assert leftover == []


STACK = textwrap.dedent(
    """
    import json, matplotlib, numpy, pyarrow, scipy, tokenizers, torch, transformers
    import matplotlib.pyplot as plt
    torch.manual_seed(0)
    x = torch.randn(4, 4)
    fig = plt.figure(); plt.plot([0, 1]); fig.savefig("/run-dir/plot.png")
    print("PROBE " + json.dumps({"torch": torch.__version__, "sum": float(x.sum()),
                                 "threads": torch.get_num_threads()}))
    """
)


def test_stack_works_sealed(image_id, dirs):
    run_dir, recipes = dirs
    report, _ = _probe(image_id, run_dir, recipes, code=STACK)
    assert report["torch"] == "2.13.0+cpu"
    assert (run_dir / "plot.png").stat().st_size > 0


def _numeric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith(("timing_s/", "perf/"))} for r in rows]


def test_recipe_in_docker_matches_the_local_run_bitwise(image_id, tmp_path):
    """The same recipe run locally and inside the sealed image: every metric equal to the bit. The local run takes
    its warm start from the session's cache (trained once for the suite); the container, which sees no cache,
    trains its own: equal metrics also say the cached warm start is the one training gives."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}  # HARNESS_CACHE: the session's (tests/conftest.py)
    outs = {}
    for runtime in ("local", "docker"):
        outs[runtime] = tmp_path / runtime
        proc = subprocess.run([sys.executable, "-m", "harness", "run", "qwen3_vl_30b", "--profile", "cpu", "--steps",
                               "4", "--runtime", runtime, "--image", IMAGE, "--out", str(outs[runtime]), "--quiet"],
                              capture_output=True, text=True, timeout=1800, env=env, cwd=tmp_path)
        assert (outs[runtime] / "metrics.jsonl").is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    manifest = json.loads((outs["docker"] / "manifest.json").read_text())
    assert manifest["runtime"]["kind"] == "docker" and manifest["runtime"]["image_id"] == image_id
    assert manifest["status"] == "complete"
    local, sealed = _numeric_rows(outs["local"]), _numeric_rows(outs["docker"])
    assert len(local) == len(sealed) == 5  # step 0 (validation before training) and 4 steps
    assert local == sealed
