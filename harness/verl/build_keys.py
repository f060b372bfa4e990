"""Generate ``harness/verl/verl_keys.json`` from verl's fully resolved default trainer configs.

Usage: ``python -m harness.verl.build_keys DIR [--revision REV] [--out FILE]`` where DIR is a
checkout of verl (the configs are read from ``verl/trainer/config/``) or a folder holding the
configs themselves. Every ``_generated_ppo_trainer.yaml`` (the ``dp`` engine, FSDP) and
``_generated_ppo_<engine>_trainer.yaml`` (``model_engine=<engine>``: megatron, torchtitan,
veomni, ...) found there is read; the revision comes from ``--revision`` or a ``REVISION`` file in
DIR. Those files are verl's (Apache-2.0); the JSON written here is a data file derived from them:
every dotted key with its default value, and the engines that have it.

Layout of the JSON:

- ``engines``: engine name -> the generated file it was read from.
- ``keys``: the union of all engines, dotted key -> default (the first engine's default, in the
  order of ``engines``, where several have the key); nested mappings are flattened, lists and
  empty mappings are leaves.
- ``engines_of``: for a key that not every engine has, the engines that have it.
- ``defaults``: per engine, the keys whose default there differs from ``keys``.

OmegaConf interpolations (``${oc.select:key,default}``, ``${key}``, ``${.sibling}``) are kept
verbatim as strings; :mod:`harness.verl.overrides` resolves them after the launcher's overrides
are merged, the way OmegaConf would. ``???`` (a mandatory value) is kept verbatim too.

Needs PyYAML (a development-time dependency only; the shipped JSON is read with ``json``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

CONFIG_DIR = Path("verl/trainer/config")
GENERATED = re.compile(r"^_generated_ppo(?:_(?P<engine>[a-z0-9]+))?_trainer\.yaml$")
DEFAULT_OUT = Path(__file__).with_name("verl_keys.json")


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {dotted key: leaf}; lists and empty mappings are leaves."""
    out: dict[str, Any] = {}
    if isinstance(node, dict) and node:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten(value, path))
    else:
        out[prefix] = node
    return out


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml  # development-time only

    with path.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: not a mapping")
    return data


def engine_files(src_dir: Path) -> dict[str, Path]:
    """engine -> generated config file (``dp`` first, then by name)."""
    folder = src_dir / CONFIG_DIR if (src_dir / CONFIG_DIR).is_dir() else src_dir
    found = {}
    for path in sorted(folder.glob("_generated_ppo*_trainer.yaml")):
        match = GENERATED.match(path.name)
        if match:
            found[match["engine"] or "dp"] = path
    if "dp" not in found:
        raise SystemExit(f"{folder}: no _generated_ppo_trainer.yaml (give a verl checkout or its config folder)")
    return {"dp": found.pop("dp"), **found}


def build(src_dir: Path, revision: str | None = None) -> dict[str, Any]:
    files = engine_files(src_dir)
    if revision is None:
        rev_file = src_dir / "REVISION"
        if not rev_file.is_file():
            raise SystemExit(f"{src_dir}: no REVISION file; pass --revision (the verl commit the configs are from)")
        revision = rev_file.read_text(encoding="utf-8").split()[0]
    flat = {engine: flatten(_load_yaml(path)) for engine, path in files.items()}
    keys: dict[str, Any] = {}
    for values in flat.values():
        for key, value in values.items():
            keys.setdefault(key, value)
    engines_of = {k: [e for e in flat if k in flat[e]] for k in keys}
    names = ", ".join(f"verl/trainer/config/{p.name}" for p in files.values())
    return {
        "_source": (f"Derived from verl (https://github.com/volcengine/verl, Apache-2.0) at revision {revision}: "
                    f"{names}, the fully resolved default trainer configs of each engine. Values are verl's "
                    "defaults; ${...} strings are OmegaConf interpolations kept verbatim; '???' marks a mandatory "
                    "value."),
        "_generator": "python -m harness.verl.build_keys VERL_CHECKOUT --revision REV",
        "revision": revision,
        "engines": {engine: path.name for engine, path in files.items()},
        "keys": dict(sorted(keys.items())),
        "engines_of": {k: v for k, v in sorted(engines_of.items()) if len(v) < len(flat)},
        "defaults": {engine: {k: v for k, v in sorted(values.items()) if keys[k] != v}
                     for engine, values in flat.items()},
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="a verl checkout, or a folder with its generated trainer yaml files")
    parser.add_argument("--revision", help="the verl commit the configs are from (else DIR/REVISION)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.write_text(render(build(args.src, args.revision)), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
