"""The hostile-input corpus (tests/fixtures/hostile/cases.txt): each case refused cleanly, quickly, harmlessly."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import pickle
import re
import shlex
import stat
import struct
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import forkserver
import numpy as np
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


UTC = "2026-01-01T00:00:00Z"


@functools.cache
def _manifest(recipe: str) -> str:
    """The manifest of an interrupted run of RECIPE (cpu, smoke) at step 2 of 4, as this harness writes it."""
    from harness.config.recipe import resolve
    from harness.run.runner import base_manifest

    res = resolve(recipe, "cpu", "smoke")
    manifest = {"schema_version": 1, "status": "interrupted", "created_utc": UTC, "finished_utc": UTC,
                "error": "interrupted by SIGTERM after step 2; checkpoint saved",
                **base_manifest(res, steps=4, runtime="local", world=1, fault={})}
    manifest["steps"]["completed"] = 2
    return json.dumps(manifest)


def _mllog(key: str, value: object = None, **meta: object) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": {"file": "x.py", "lineno": 1, **meta}}) + "\n"


def _interrupted(tmp: Path, run: Path, recipe: str = "qwen3_1_7b", change: Callable[[Path], None] | None = None,
                 states: bool = True) -> None:
    """An interrupted run as the harness leaves it (manifest, metrics, MLPerf log, one complete checkpoint at
    step 2); the rank's state files are placeholders: the cases built on it are refused before they are read."""
    run.mkdir()
    manifest = json.loads(_manifest(recipe))
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "actor/pg_loss": 0.5}) + "\n" for s in (1, 2)))
    (run / "mlperf.log").write_text(_mllog("init_start") + "".join(_mllog(k, epoch_num=s) for s in (1, 2)
                                                                   for k in ("epoch_start", "epoch_stop")))
    ckpt = run / "checkpoints" / "step-000002"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer-state.json").write_text(json.dumps({
        "step": 2, "tokens_seen": 1000, "world_size": 1, "utc": UTC,
        "scheduler": {"base_lrs": [0.0003], "last_epoch": 2, "_step_count": 3, "_is_initial": False,
                      "_get_lr_called_within_step": False, "_last_lr": [0.0003], "lr_lambdas": [None]},
        "loader": {"epoch": 0, "position": 32, "seed": 42, "num_prompts": 1024, "batch_size": 16}}))
    (ckpt / "resolved-recipe.json").write_text(json.dumps(manifest["resolved_config"]))
    if states:
        (ckpt / "state-rank0.json").write_text("{}")
        (ckpt / "state-rank0.safetensors").write_bytes(b"")
    (ckpt / "COMPLETE").write_text("step-000002\n")
    if change is not None:
        change(run)


def _edited(name: str, edit: Callable[[Any], Any]) -> Callable[[Path, Path], None]:
    """A setup: the interrupted run with one of its JSON files edited (``edit`` changes the document in place or
    returns its replacement)."""
    def change(run: Path) -> None:
        path = run / name
        doc = json.loads(path.read_text())
        out = edit(doc)
        path.write_text(json.dumps(doc if out is None else out))
    return lambda tmp, run: _interrupted(tmp, run, change=change)


def _fifo_in_run(name: str) -> Callable[[Path, Path], None]:
    def change(run: Path) -> None:
        (run / name).unlink()
        os.mkfifo(run / name)
    return lambda tmp, run: _interrupted(tmp, run, change=change)


def _bad_epoch(run: Path) -> None:
    lines = (run / "mlperf.log").read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"epoch_num": 1', '"epoch_num": "x"')
    (run / "mlperf.log").write_text("".join(lines))


def _checkpoint(tmp: Path, run: Path, planted: bool) -> None:
    _interrupted(tmp, run, recipe="qwen3_vl_30b", states=False)
    if planted:
        ckpt = run / "checkpoints" / "step-000002"
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


def _keys_recipe(tmp: Path, run: Path) -> None:
    """A recipe with an extra object of 100,000 keys (1.5 MB): parsed in quadratic time before the fix."""
    recipe = (ROOT / "recipes" / "qwen3_1_7b.json").read_text().rstrip().rstrip("}")
    extra = ",\n".join(f'    "key{i:06d}": {i}' for i in range(100_000))
    (tmp / "keys.json").write_text(f'{recipe},\n  "extra": {{\n{extra}\n  }}\n}}\n')


def _npz_bomb(path: Path, member: str, nbytes: int) -> None:
    """A .npz of one deflated float32 array of ``nbytes`` zeros (zip64), ~nbytes/1000 on disk, written without
    inflating it: the compressed block of 1 MiB of zeros, repeated (each ends in a full flush, so they chain)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)})
    head, chunk = buf.getvalue(), bytes(1 << 20)
    deflate = [zlib.compressobj(9, zlib.DEFLATED, -15) for _ in range(2)]
    block = deflate[0].compress(chunk) + deflate[0].flush(zlib.Z_FULL_FLUSH)
    stream = deflate[1].compress(head) + deflate[1].flush(zlib.Z_FULL_FLUSH) + block * (nbytes >> 20) + b"\x03\x00"
    crc = zlib.crc32(head)
    for _ in range(nbytes >> 20):
        crc = zlib.crc32(chunk, crc)
    name, full = member.encode(), 0xFFFFFFFF
    zip64 = struct.pack("<HHQQ", 1, 16, len(head) + nbytes, len(stream))
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 8, 0, 0x21, crc, full, full, len(name), len(zip64))
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 8, 0, 0x21, crc, full, full, len(name),
                          len(zip64), 0, 0, 0, 0, 0) + name + zip64
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(name) + len(zip64)
                      + len(stream), 0)
    path.write_bytes(local + name + zip64 + stream + central + end)


def _bomb_baseline(tmp: Path, run: Path) -> None:
    """The cpu baseline, its replay archive replaced by a 4 MB file that inflates to 4 GiB."""
    _npz_bomb(tmp / "bomb.rollouts.npz", "initial/model.embed_tokens.weight.npy", 4 << 30)
    doc = json.loads((ROOT / "baselines" / "qwen3_1_7b" / "cpu-smoke.json").read_text())
    doc["replay"].update(file="bomb.rollouts.npz",
                         sha256=hashlib.sha256((tmp / "bomb.rollouts.npz").read_bytes()).hexdigest())
    (tmp / "bomb.json").write_text(json.dumps(doc))


def _parquet_rows(tmp: Path, run: Path) -> None:
    """78 KB of parquet holding 10^7 identical rows (zstd + dictionary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 10_000_000
    zeros = pa.array(np.zeros(n, dtype=np.int32))
    table = pa.table({"problem": pa.DictionaryArray.from_arrays(zeros, pa.array(["What is 1+1?"])),
                      "answer": pa.DictionaryArray.from_arrays(zeros, pa.array(["2"]))})
    pq.write_table(table, tmp / "rows10m.parquet", compression="zstd", row_group_size=n)
    _recipe_with_data(tmp, "df", tmp / "rows10m.parquet")


def _st_header(header: dict) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


def _model_recipe(tmp: Path, name: str, config: dict, weights: bytes) -> None:
    """``{name}.json``: qwen3_1_7b with model.path = {tmp}/{name} holding ``config`` and ``weights``."""
    model = tmp / name
    model.mkdir()
    recipe = json.loads((ROOT / "recipes" / "qwen3_1_7b.json").read_text())
    text = {**recipe["model"]["architecture"]["text"], **recipe["scales"]["smoke"]["model"]["architecture"]["text"]}
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", **{k: v for k, v in text.items()
                                                                             if v is not None}, **config}))
    (model / "model.safetensors").write_bytes(weights)
    recipe["name"], recipe["model"]["path"] = name, str(model)
    (tmp / f"{name}.json").write_text(json.dumps(recipe))


PUBLISHED = ROOT / "certificates" / "gpu-1x-h200"


def _forged_certificate(tmp: Path, run: Path) -> None:
    """The published certificate copied to X/c04, its payload edited, re-signed with a fresh key, and that key
    dropped into the directory (what anyone can do)."""
    import base64
    import shutil

    from harness.judge.attest import keygen, load_signer, sign

    cert = tmp / "X" / "c04"
    shutil.copytree(PUBLISHED, cert)
    stmt = json.loads(base64.b64decode(json.loads((cert / "certificate.json").read_text())["payload"]))
    stmt["predicate"]["system"]["accelerator"].update(model="NVIDIA B300", count=8)
    priv, pub, _ = keygen(tmp / "forger")
    (cert / "certificate.json").write_text(json.dumps(sign(stmt, load_signer(priv))))
    shutil.copy(pub, cert / "signing-key.pub.pem")


def _envelope(tmp: Path, signatures: list[dict[str, str]] | None = None, text: str | None = None) -> None:
    """tmp/cert.json: the published envelope with other signature entries, or ``text`` built from it."""
    env = json.loads((PUBLISHED / "certificate.json").read_text())
    if signatures is not None:
        env["signatures"] = signatures
    (tmp / "cert.json").write_text(text.format(**env) if text else json.dumps(env))


def _duplicate_result(tmp: Path, run: Path) -> None:
    import base64

    env = json.loads((PUBLISHED / "certificate.json").read_text())
    inner = base64.b64decode(env["payload"]).decode()
    inner = re.sub(r'"result": "(pass|fail)"', r'"result": "\1", "result": "pass"', inner)
    (tmp / "cert.json").write_text(json.dumps({**env, "payload": base64.b64encode(inner.encode()).decode()}))


def _copied_run(tmp: Path, run: Path) -> None:
    import shutil

    shutil.copytree(PUBLISHED / "runs" / "qwen3-1-7b-smoke" / "run-1", tmp / "run-1")


KEYID = "5969c1b502e04e8fcf7d3c1b91c6991f20cb5ad7101be95f5a00a627e8ee5202"
SETUPS: dict[str, Callable[[Path, Path], None]] = {
    "forged-certificate": _forged_certificate,
    "keyid-newline": lambda tmp, run: _envelope(tmp, [{"keyid": KEYID + "\nVERIFIED: gpu-8x-b300 19/19",
                                                       "sig": "AAAA"}]),
    "duplicate-keyids": lambda tmp, run: _envelope(tmp, [{"keyid": KEYID, "sig": "AAAA"}] * 2),
    "100k-signatures": lambda tmp, run: _envelope(tmp, [{"keyid": "f00dfeed" * 8, "sig": "AAAA"}] * 100_000),
    "duplicate-payload-key": lambda tmp, run: _envelope(
        tmp, text='{{"payloadType": "{payloadType}", "payload": "{payload}", "payload": "e30=", "signatures": []}}'),
    "duplicate-result-key": _duplicate_result,
    "copied-run": _copied_run,
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
    "keys-recipe": _keys_recipe,
    "npz-bomb-baseline": _bomb_baseline,
    "parquet-10m-rows": _parquet_rows,
    "model-header-2e62": lambda tmp, run: _model_recipe(tmp, "mp", {}, struct.pack("<Q", 2 ** 62) + b"{}"),
    "model-offset-2e40": lambda tmp, run: _model_recipe(tmp, "mo", {}, _st_header(
        {"model.norm.weight": {"dtype": "F32", "shape": [2 ** 38], "data_offsets": [0, 2 ** 40]}})),
    "model-config-68gb": lambda tmp, run: _model_recipe(tmp, "mh", {"hidden_size": 65536, "vocab_size": 10 ** 6,
                                                                   "num_hidden_layers": 200}, b""),
    "newline-source-recipe": _newline_source,
    "repeated-key-3000": _repeated_key,
    "launcher-10mb": _big_launcher,
    "fifo-run-metrics": _fifo_in_run("metrics.jsonl"),
    "fifo-run-mlperf": _fifo_in_run("mlperf.log"),
    "state-is-a-list": _edited("checkpoints/step-000002/trainer-state.json", lambda d: []),
    "scheduler-a-string": _edited("checkpoints/step-000002/trainer-state.json", lambda d: d.update(scheduler="x")),
    "manifest-no-recipe": _edited("manifest.json", lambda d: d.pop("recipe") and None),
    "manifest-steps-abc": _edited("manifest.json", lambda d: d["steps"].update(requested="abc")),
    "override-no-value": _edited("manifest.json", lambda d: d.update(overrides=[{"key": "seed"}])),
    "mlperf-epoch-x": lambda tmp, run: _interrupted(tmp, run, change=_bad_epoch),
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
    forkserver.start()  # its imports are not the case's time
    t0 = time.monotonic()
    try:
        proc = forkserver.run(args, cwd=tmp, env=env, timeout=TIME_LIMIT_S)
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
                   "set-trust-remote-code", "launcher-command-substitution", "json-100k-keys",
                   "certificate-100k-signatures", "npz-bomb-replay", "parquet-10m-rows", "safetensors-header-2e62",
                   "safetensors-offset-2e40", "model-config-68gb", "certificate-forged-own-pubkey",
                   "certificate-forged-keyid", "certificate-keyid-newline", "certificate-duplicate-keyids",
                   "certificate-100k-signatures", "certificate-duplicate-payload", "certificate-duplicate-result",
                   "mlperf-check-relative-path", "launcher-parser-crash-lint",
                   "launcher-parser-crash-import", "export-source-newline", "lint-repeated-key",
                   "slurm-partition-newline", "slurm-time-newline", "fifo-metrics-auto-resume",
                   "fifo-mlperf-log-resume", "resume-state-not-object", "resume-manifest-no-recipe",
                   "resume-mlperf-epoch-string", "gate-recipe-traversal", "run-steps-1e12",
                   "record-baseline-warm-up-only"):
        assert needed in names, needed
