"""Fuzzing the entry points that read foreign files: every input runs in a child process (``driver.py``).

``lint-verl`` and ``import-verl`` (launchers: bash pieces, a real launcher with text spliced in, code points
around ``{``, ``$`` and ``(``, raw bytes), ``validate`` (mutated recipes, any JSON, raw bytes), ``compare RUN_DIR``
(a real run directory with its manifest or metrics mutated), ``verify-certificate`` (the published certificate,
its envelope or its in-toto Statement mutated) and the replay baseline loader (a baseline and its checksummed
rollouts archive, either mutated). A crash, a hang, a traceback or an exit code other than 0, 1, 2 fails the
test and saves the input (:mod:`fuzzlib`). ``HARNESS_FUZZ_EXAMPLES`` sets the examples per entry point (a CI
slice by default; ``nox -s fuzz`` runs more).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzzlib import ROOT, Driver, check, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.fuzz

RUN = ROOT / "certificates" / "gpu-1x-h200" / "runs" / "qwen3-1-7b-smoke" / "run-1"
CERT = ROOT / "certificates" / "gpu-1x-h200"
BASELINE = ROOT / "baselines" / "qwen3_1_7b" / "cpu-smoke.json"
LAUNCHER = (ROOT / "tests" / "fixtures" / "verl" / "clean_fsdp.sh").read_text(encoding="utf-8")
RECIPE: dict[str, Any] = json.loads((ROOT / "recipes" / "qwen3_1_7b.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Driver, Path]]:
    scratch = tmp_path_factory.mktemp("fuzz")
    driver = Driver(scratch)
    yield driver, scratch
    driver.close()


# ----------------------------------------------------------------------------- generic JSON mutation
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(node, list):
        for i, value in enumerate(node[:8]):
            out.extend(_paths(value, prefix + (i,)))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: Any, n: int = 3) -> Any:
    """``base`` with up to ``n`` edits: a value replaced by any JSON value, a key deleted or added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, n))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        how = draw(st.sampled_from(["replace", "delete", "add"]))
        if how == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif how == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(JSON_VALUES)
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return doc


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode("utf-8")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate gives bytes that are not UTF-8


# ----------------------------------------------------------------------------- launchers
HOSTILE = st.one_of(
    st.integers(0x80, 0x10FFFF).map(chr),
    st.sampled_from(["\U000CB100", "\U0002C7E5", "\U000F0000", "\U0010FFFF", "\u0100", "\x1b", "\x7f", "\x85",
                     "\x00", "\r", "\u2028", "\ufeff"]),
    st.characters(),
)
AROUND = st.sampled_from(["{", "$", "(", "${", "{1..", "$(", "$((", "'", '"', "# ", "`", "\\", "<<E\n"])
PIECES = st.sampled_from(["$", "${", "}", "$(", ")", "(", "'", '"', "`", "\\", "\n", " ", "=", "[[", "]]", "<<EOF\n",
                          "EOF\n", "|", "&&", ";", "#", "case x in", "esac", "if", "then", "fi", "A=(", "\"$@\"",
                          "set -u\n", "f() {", "for i in", "do", "done", "python3 -m verl.trainer.main_ppo ",
                          "trainer.nnodes=", "data.train_batch_size=", "{1..3}", "eval ", "source "])
LINES = LAUNCHER.splitlines(keepends=True)


@st.composite
def launchers(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["pieces", "splice", "around", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "pieces":
        parts = draw(st.lists(st.one_of(PIECES, HOSTILE, st.text(max_size=12)), max_size=30))
        return _bytes("".join(parts))
    text = LAUNCHER
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text)))
        ins = draw(st.lists(st.one_of(AROUND, HOSTILE, PIECES), min_size=1, max_size=4)) if kind == "splice" \
            else [draw(AROUND), draw(HOSTILE), draw(st.sampled_from(["", " x", "}", ")", "\n"]))]
        text = text[:pos] + "".join(ins) + text[pos:]
    return _bytes(text)


@fuzz_settings()
@given(script=launchers())
def test_lint_verl(work: tuple[Driver, Path], script: bytes) -> None:
    driver, scratch = work
    path = scratch / "launcher.sh"
    path.write_bytes(script)
    check(driver.run({"cli": ["lint-verl", str(path)]}), "lint-verl", {"launcher.sh": script}, "launcher.sh")


@fuzz_settings()
@given(script=launchers())
def test_import_verl(work: tuple[Driver, Path], script: bytes) -> None:
    driver, scratch = work
    path = scratch / "launcher.sh"
    path.write_bytes(script)
    argv = ["import-verl", str(path), "--out", str(scratch / "imported.json"), "--force"]
    check(driver.run({"cli": argv}), "import-verl", {"launcher.sh": script}, "launcher.sh")


# ----------------------------------------------------------------------------- recipes
@st.composite
def recipes(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "json":
        return _dump(draw(JSON_VALUES))
    return _dump(draw(mutated(RECIPE)))


@fuzz_settings()
@given(recipe=recipes())
def test_validate(work: tuple[Driver, Path], recipe: bytes) -> None:
    driver, scratch = work
    path = scratch / f"{RECIPE['name']}.json"  # named after the recipe: the name check does not hide the rest
    path.write_bytes(recipe)
    check(driver.run({"cli": ["validate", str(path)]}), "validate", {path.name: recipe}, path.name)


# ----------------------------------------------------------------------------- run directories
MANIFEST = json.loads((RUN / "manifest.json").read_text(encoding="utf-8"))
METRICS = (RUN / "metrics.jsonl").read_text(encoding="utf-8").splitlines()


@st.composite
def run_dirs(draw: st.DrawFn) -> dict[str, bytes]:
    manifest, metrics = _dump(MANIFEST), list(METRICS)
    what = draw(st.sampled_from(["manifest", "metrics", "both", "bytes"]))
    if what in ("manifest", "both"):
        manifest = _dump(draw(mutated(MANIFEST)))
    if what in ("metrics", "both"):
        k = draw(st.integers(0, len(metrics) - 1))
        how = draw(st.sampled_from(["mutate", "garbage", "drop", "duplicate", "truncate"]))
        if how == "mutate":
            metrics[k] = _dump(draw(mutated(json.loads(metrics[k])))).decode("utf-8", "surrogatepass")
        elif how == "garbage":
            metrics[k] = draw(st.text(max_size=40))
        elif how == "drop":
            del metrics[k]
        elif how == "duplicate":
            metrics.insert(k, metrics[k])
        else:
            metrics = metrics[:k]
    files = {"manifest.json": manifest, "metrics.jsonl": _bytes("\n".join(metrics) + "\n")}
    if what == "bytes":
        files[draw(st.sampled_from(sorted(files)))] = draw(st.binary(max_size=200))
    return files


@fuzz_settings()
@given(files=run_dirs(), report=st.booleans())
def test_compare(work: tuple[Driver, Path], files: dict[str, bytes], report: bool) -> None:
    driver, scratch = work
    run = scratch / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    for name, data in files.items():
        (run / name).write_bytes(data)
    argv = ["compare", str(run)] + ([] if report else ["--no-report"])
    check(driver.run({"cli": argv}), "compare", files)


# ----------------------------------------------------------------------------- certificates
ENVELOPE = json.loads((CERT / "certificate.json").read_text(encoding="utf-8"))
STATEMENT = json.loads(base64.b64decode(ENVELOPE["payload"]))


@st.composite
def certificates(draw: st.DrawFn) -> bytes:
    what = draw(st.sampled_from(["statement", "envelope", "bytes"]))
    if what == "bytes":
        return draw(st.binary(max_size=300))
    if what == "envelope":
        return _dump(draw(mutated(ENVELOPE)))
    env = dict(ENVELOPE, payload=base64.b64encode(_dump(draw(mutated(STATEMENT)))).decode("ascii"))
    return _dump(env)


@pytest.fixture(scope="module")
def cert_copy(work: tuple[Driver, Path]) -> Path:
    """The published certificate's directory, copied once: each example writes its own certificate.json."""
    dest = work[1] / "cert"
    shutil.copytree(CERT, dest)
    return dest


@fuzz_settings()
@given(cert=certificates())
def test_verify_certificate(work: tuple[Driver, Path], cert_copy: Path, cert: bytes) -> None:
    driver, _ = work
    (cert_copy / "certificate.json").write_bytes(cert)
    argv = ["verify-certificate", str(cert_copy / "certificate.json"), "--pubkey",
            str(cert_copy / "signing-key.pub.pem")]
    check(driver.run({"cli": argv}), "verify-certificate", {"certificate.json": cert}, "certificate.json")


# ----------------------------------------------------------------------------- baselines and rollouts
STEPS = 2  # the replay archive of a two-step baseline: small enough to mutate and to save


def _base_archive() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    with np.load(BASELINE.with_name(baseline["replay"]["file"]), allow_pickle=False) as z:
        arrays = {k: z[k][:2] for k in z.files if k.split("/")[0] in {str(s) for s in range(1, STEPS + 1)}}
    baseline["steps"] = STEPS
    keep = sorted(baseline["metrics"])[:3]  # a few metrics, two steps each: a saved failure stays small
    baseline["metrics"] = {k: {f: v[:STEPS] if f != "tiers" else v for f, v in baseline["metrics"][k].items()}
                           for k in keep}
    rep = baseline["replay"]
    rep["metrics"] = [m for m in rep["metrics"] if m in keep]
    rep["noise"] = {k: v[:STEPS] for k, v in rep["noise"].items() if k in keep}
    return baseline, arrays


BASE_DOC, BASE_ARRAYS = _base_archive()
ARRAY = st.one_of(
    st.lists(st.integers(-2**31, 2**31 - 1), max_size=6).map(lambda v: np.asarray(v, dtype=np.int64)),
    st.lists(st.floats(width=32), max_size=6).map(lambda v: np.asarray(v, dtype=np.float32)),
    st.lists(st.text(max_size=5), max_size=4).map(np.asarray),
    st.sampled_from([np.zeros((0, 3)), np.zeros((2, 0), dtype=np.uint8), np.asarray(1.5)]),
)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


@st.composite
def baselines(draw: st.DrawFn) -> dict[str, bytes]:
    arrays = dict(BASE_ARRAYS)
    what = draw(st.sampled_from(["arrays", "bytes", "baseline", "sha"]))
    if what == "arrays":
        for _ in range(draw(st.integers(1, 3))):
            key = draw(st.sampled_from(sorted(arrays)) | st.text(min_size=1, max_size=10))
            if draw(st.booleans()):
                arrays[key] = draw(ARRAY)
            else:
                arrays.pop(key, None)
    archive = _npz(arrays)
    if what == "bytes":
        raw = bytearray(archive)
        for _ in range(draw(st.integers(1, 8))):
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        archive = bytes(raw[:draw(st.integers(0, len(raw)))])
    doc = copy.deepcopy(BASE_DOC)
    doc["replay"]["file"] = "base.rollouts.npz"
    doc["replay"]["sha256"] = hashlib.sha256(archive).hexdigest()  # the attacker writes both files
    if what == "baseline":
        doc = draw(mutated(doc, n=2))
    elif what == "sha":
        doc["replay"]["sha256"] = draw(st.text(max_size=70))
    return {"base.json": _dump(doc), "base.rollouts.npz": archive}


@fuzz_settings()
@given(files=baselines())
def test_replay_baseline(work: tuple[Driver, Path], files: dict[str, bytes]) -> None:
    driver, scratch = work
    folder = scratch / "baseline"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    check(driver.run({"replay": str(folder / "base.json")}), "replay-baseline", files)
