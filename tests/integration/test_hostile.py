"""The hostile-input corpus (tests/fixtures/hostile/cases.txt): each case refused cleanly, quickly, harmlessly."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "tests" / "fixtures" / "hostile"
MARKER = "PWNED"
TIME_LIMIT_S = 30.0
WATCHED = ("recipes", "baselines", "schemas")  # checkout folders a run could be pointed at


def load_cases() -> list[tuple[str, str, int, str, str]]:
    """(case, setup, exit code, expected text, argv) for every line of cases.txt."""
    cases = []
    for n, line in enumerate((FX / "cases.txt").read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(" | ")]
        assert len(fields) == 5, f"cases.txt:{n}: expected 5 fields separated by ' | '"
        name, setup, code, text, argv = fields
        assert setup in SETUPS, f"cases.txt:{n}: unknown setup {setup!r}"
        cases.append((name, setup, int(code), text, argv))
    return cases


# ----------------------------------------------------------------------------- setups
class _Payload:
    """Unpickling it creates the marker file: what a planted pickle would do."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _checkpoint(tmp: Path, run: Path, planted: bool) -> None:
    run.mkdir()
    manifest = {"schema_version": 1, "status": "interrupted", "recipe": {"name": "qwen3_vl_30b"}, "profile": "cpu",
                "scale": "smoke", "steps": {"requested": 4, "completed": 2}, "overrides": [], "resolved_config": {}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    ckpt = run / "checkpoints" / "step-000002"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer-state.json").write_text(json.dumps({"step": 2, "world_size": 1}))
    (ckpt / "resolved-recipe.json").write_text("{}")
    (ckpt / "COMPLETE").write_text("step-000002\n")
    if planted:
        (ckpt / ".metadata").write_bytes(pickle.dumps(_Payload(tmp / MARKER)))


def _recipe_with_data(tmp: Path, name: str, rows_file: Path) -> None:
    recipe = json.loads((ROOT / "recipes" / "qwen3_vl_30b.json").read_text())
    recipe["name"], recipe["data"]["train_files"] = name, str(rows_file)
    (tmp / f"{name}.json").write_text(json.dumps(recipe))


def _image_rows(tmp: Path, image: str) -> Path:
    rows = tmp / f"{image}.jsonl"
    rows.write_text(json.dumps({"problem": "<image>Which colour is the picture?", "answer": "A",
                                "images": [image]}) + "\n")
    return rows


def _huge_png(tmp: Path, run: Path) -> None:
    from PIL import Image

    Image.new("1", (10_000, 10_000)).save(tmp / "huge.png")  # a few KB on disk, 10^8 pixels
    _recipe_with_data(tmp, "png", _image_rows(tmp, "huge.png"))


def _fifo_png(tmp: Path, run: Path) -> None:
    os.mkfifo(tmp / "pic.png")
    _recipe_with_data(tmp, "fpng", _image_rows(tmp, "pic.png"))


def _fifo_data(tmp: Path, run: Path) -> None:
    os.mkfifo(tmp / "data.jsonl")
    _recipe_with_data(tmp, "fifo", tmp / "data.jsonl")


def _nonempty(tmp: Path, run: Path) -> None:
    (tmp / "mine").mkdir()
    (tmp / "mine" / "report.html").write_text("<p>my own report</p>\n")
    (tmp / "mine" / "metrics.jsonl").write_text('{"step": 1, "x": 1}\n')


def _newline_source(tmp: Path, run: Path) -> None:
    recipe = json.loads((ROOT / "recipes" / "qwen3_1_7b.json").read_text())
    recipe["name"], recipe["source"]["launcher"] = "pwn", f"x\ntouch {tmp}/{MARKER}\n#"
    (tmp / "pwn.json").write_text(json.dumps(recipe))


def _repeated_key(tmp: Path, run: Path) -> None:
    lines = "".join(f"  trainer.project_name=p{i} \\\n" for i in range(3000))
    (tmp / "dup.sh").write_text(f"python3 -m verl.trainer.main_ppo \\\n{lines}  trainer.nnodes=1\n")


def _big_launcher(tmp: Path, run: Path) -> None:
    line = "  trainer.project_name=p \\\n"
    (tmp / "big.sh").write_text("python3 -m verl.trainer.main_ppo \\\n" + line * (10_000_000 // len(line)) + "  x=1\n")


def _sparse(tmp: Path, run: Path) -> None:
    with open(tmp / "big.json", "wb") as fh:
        fh.truncate(2 << 30)  # 2 GiB, sparse: costs no disk


SETUPS: dict[str, Callable[[Path, Path], None]] = {
    "none": lambda tmp, run: None,
    "pickled-checkpoint": lambda tmp, run: _checkpoint(tmp, run, planted=True),
    "dcp-checkpoint": lambda tmp, run: _checkpoint(tmp, run, planted=False),
    "nonempty-dir": _nonempty,
    "dangling-link": lambda tmp, run: os.symlink(tmp / "nowhere", tmp / "link"),
    "plain-file": lambda tmp, run: (tmp / "file.txt").write_text("mine\n"),
    "fifo": lambda tmp, run: os.mkfifo(tmp / "fifo"),
    "fifo-data-recipe": _fifo_data,
    "huge-png-recipe": _huge_png,
    "fifo-png-recipe": _fifo_png,
    "sparse-2g": _sparse,
    "newline-source-recipe": _newline_source,
    "repeated-key-3000": _repeated_key,
    "launcher-10mb": _big_launcher,
}


# ----------------------------------------------------------------------------- checks
def snapshot(roots: list[Path], skip: Path) -> dict[str, tuple]:
    """Type, mode, owner, size and (for regular files up to 1 MiB, else mtime) content digest of every entry."""
    out: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            d = Path(dirpath)
            dirnames[:] = [n for n in dirnames if d / n != skip]
            for name in [*dirnames, *filenames]:
                p = d / name
                st = os.lstat(p)
                digest: object = None
                if stat.S_ISREG(st.st_mode):
                    digest = hashlib.sha256(p.read_bytes()).hexdigest() if st.st_size <= 1 << 20 else st.st_mtime_ns
                elif stat.S_ISLNK(st.st_mode):
                    digest = os.readlink(p)
                out[str(p)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_size,
                               digest)
    return out


def markers(roots: list[Path]) -> list[str]:
    return [str(Path(d) / MARKER) for root in roots for d, _, files in os.walk(root) if MARKER in files]


@pytest.mark.parametrize("name,setup,code,text,argv", [pytest.param(*c, id=c[0]) for c in load_cases()])
def test_hostile_case(name: str, setup: str, code: int, text: str, argv: str, tmp_path: Path,
                      tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp, run = tmp_path / "scratch", tmp_path / "scratch" / "run"
    tmp.mkdir()
    SETUPS[setup](tmp, run)
    args = [a.format(tmp=tmp, run=run, repo=ROOT, fx=FX, nl="\n") for a in shlex.split(argv)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "DOCKER_HOST": "unix:///nonexistent/docker.sock", "HARNESS_RUNTIME_DEFAULT": "local",
           "HARNESS_CACHE": str(tmp_path_factory.mktemp("cache"))}
    watched = [tmp, FX, *(ROOT / w for w in WATCHED)]
    before = snapshot(watched, skip=run)
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=tmp, env=env, capture_output=True,
                              text=True, timeout=TIME_LIMIT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still running after {TIME_LIMIT_S:.0f} s")
    took = time.monotonic() - t0
    lines = proc.stderr.splitlines()
    assert proc.returncode == code, f"{name}: exit {proc.returncode}, expected {code}; stderr: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert len(lines) == 1 if code == 2 else len(lines) <= 1, f"{name}: stderr has {len(lines)} lines: {lines[:5]}"
    assert text in proc.stderr + proc.stdout, f"{name}: {text!r} not in: {proc.stderr}{proc.stdout[-500:]}"
    assert markers([tmp, FX, ROOT / "recipes"]) == [] and not (ROOT / MARKER).exists(), f"{name}: a payload ran"
    after = snapshot(watched, skip=run)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], f"{name}: changed outside the run directory: {changed[:5]}"
    assert took < TIME_LIMIT_S


def test_corpus_covers_each_finding() -> None:
    names = {c[0] for c in load_cases()}
    for needed in ("pickle-in-checkpoint-resume", "docker-existing-out", "out-recipes-folder", "fifo-train-files",
                   "huge-png-image", "train-size-2e9", "compare-baseline-typo", "seed-overflow", "out-names-a-file",
                   "set-trust-remote-code", "launcher-command-substitution", "launcher-parser-crash-lint",
                   "launcher-parser-crash-import", "export-source-newline", "lint-repeated-key",
                   "slurm-partition-newline", "slurm-time-newline"):
        assert needed in names, needed
