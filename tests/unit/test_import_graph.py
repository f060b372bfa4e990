"""The import graph of ``harness``: no cycles (counting imports inside functions too) and commands that
do not import each other (a command is a thin layer over the library, not a library for other commands).

Edges are read from the source (``ast``), not from ``sys.modules``: ``from pkg import name`` is an edge
to ``pkg.name`` when that is a module, else to ``pkg``; the implicit import of a package by its own
submodules is not an edge.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "harness"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    out[name].add(sub if sub in mods else node.module)
            elif isinstance(node, ast.Import):
                out[name] |= {a.name for a in node.names if a.name.startswith("harness")}
    return {m: {t for t in ts if t in mods and t != m} for m, ts in out.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(edges(modules())) == []


def test_the_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_commands_do_not_import_each_other() -> None:
    graph = edges(modules())
    commands = {m for m in graph if m.startswith("harness.commands.")}
    crossing = sorted(f"{m} -> {t}" for m in commands for t in graph[m] if t in commands)
    assert crossing == [], "move what two commands share out of harness/commands/ (e.g. harness/run/runtime/launch.py)"


def test_nothing_below_the_commands_imports_them() -> None:
    graph = edges(modules())
    upward = sorted(f"{m} -> {t}" for m in graph if not m.startswith(("harness.commands", "harness.cli"))
                    for t in graph[m] if t.startswith("harness.commands"))
    assert upward == []


# The pipeline, lowest layer first: a module imports only from its own layer or below. The foundation holds
# what every layer needs (errors, JSON I/O, paths, the registry, the device-kind table, the numerics pin).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("harness", "errors", "jsonio", "paths", "registry", "statefile", "devices", "numerics", "assets", "schema",
     "lazyimport"),
    ("records",),  # the documents every layer writes or reads (manifest, baseline, verdict, gate, certificate)
    ("core",),  # the GRPO engine: pure math, models, the trainer; its registries name what recipes may choose
    ("config",),  # recipe, profiles, schema (enums from the engine's registries), safety rules
    ("mlperf", "plan", "run"),  # a plan (one step traced on fake ranks); a run: runner, runtimes, checkpoints, MLPerf log
    ("judge", "verl", "images"),  # verdicts: baselines, tiers, compare, report, certificates; verl import/export
    ("commands",),
    ("cli", "__main__"),
)


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else module
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"{module} is in no layer: add harness/{part} to LAYERS")


def test_nothing_imports_upward() -> None:
    graph = edges(modules())
    upward = sorted(f"{m} -> {t}" for m in graph for t in graph[m] if layer_of(t) > layer_of(m))
    assert upward == [], "move the shared part down a layer (LAYERS above)"


def test_every_module_has_a_layer() -> None:
    assert {layer_of(m) for m in modules()} == set(range(len(LAYERS)))
    assert layer_of("harness.judge.compare") > layer_of("harness.run.runner") > layer_of("harness.config.recipe")


def test_the_readme_layout_names_every_module() -> None:
    """The README's layout section is the map of the package: every stage folder and module is on it."""
    readme = (PKG.parent / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("```", layout.index("```") + 3)]
    missing = []
    for folder in [PKG, *(PKG / name for name in ("config", "run", "judge"))]:
        for entry in sorted(folder.iterdir()):
            if entry.name.startswith(("_", ".")) or (entry.is_file() and entry.suffix != ".py"):
                continue
            shown = entry.name + ("/" if entry.is_dir() else "")
            if shown not in layout:
                missing.append(str(entry.relative_to(PKG.parent)))
    assert missing == [], "add these to the README's layout section"


def test_no_python_file_over_600_lines() -> None:
    """Files stay readable in one sitting: split by stage or concern, not by line count alone."""
    root = PKG.parent
    long = sorted(f"{p.relative_to(root)}: {n}" for p in [*root.glob("harness/**/*.py"), *root.glob("tests/**/*.py"),
                                                          *root.glob("bench/**/*.py"), root / "noxfile.py"]
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600)
    assert long == []


LOADED = """
import sys
from harness.cli import main
sys.argv = ["harness", *sys.argv[1:]]
try:
    code = main()
except SystemExit as e:
    code = e.code
print("exit", code)
print(sorted(m for m in ("harness.core.algos", "harness.config.safety.rules", "torch._C", "transformers")
             if m in sys.modules))
"""


def test_validate_loads_neither_torch_nor_transformers() -> None:
    """``harness validate`` checks names and sizes only: the algorithm registries load torch lazily (the module
    is in ``sys.modules`` unloaded until a function runs) and the vocabulary check reads the tokenizer file with
    ``tokenizers``."""
    proc = subprocess.run([sys.executable, "-c", LOADED, "validate", "qwen3_vl_30b"], capture_output=True, text=True,
                          timeout=120, cwd=PKG.parent)
    assert proc.stdout.splitlines()[-2:] == ["exit 0", "['harness.config.safety.rules', 'harness.core.algos']"], (
        proc.stdout + proc.stderr[-2000:])  # the checks ran; no torch._C, no transformers


def test_a_refused_run_loads_no_torch(tmp_path: Path) -> None:
    """A run refused before it starts (here: --out is a directory holding something else) answers in its one line
    without loading torch: the checkpoint and state-file modules load it when they first touch a tensor."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    proc = subprocess.run([sys.executable, "-c", LOADED, "run", "qwen3_vl_30b", "--profile", "cpu", "--runtime",
                           "local", "--out", str(tmp_path / "mine")], capture_output=True, text=True, timeout=120,
                          cwd=PKG.parent)
    assert "holds no run" in proc.stderr, proc.stderr
    assert proc.stdout.splitlines()[-2] == "exit 2" and "torch._C" not in proc.stdout, proc.stdout
