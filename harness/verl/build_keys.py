"""Generate ``harness/verl/verl_keys.json`` from verl's fully resolved default trainer configs.

Usage: ``python -m harness.verl.build_keys DIR [--out FILE]`` where DIR holds verl's
``_generated_ppo_trainer.yaml`` (FSDP engine), ``_generated_ppo_veomni_trainer.yaml``
(``model_engine=veomni``) and a ``REVISION`` file. Those files are verl's (Apache-2.0); the JSON
written here is a data file derived from them: every dotted key with its default value.

Layout of the JSON:

- ``keys``: the union of both engines, dotted key -> default (the FSDP default where both have
  the key); nested mappings are flattened, lists and empty mappings are leaves.
- ``veomni``: the keys whose VeOmni default differs from ``keys`` (or that only VeOmni has).
- ``only``: per engine, the keys that engine alone has (``fsdp_config.*`` vs ``veomni.*``).

OmegaConf interpolations (``${oc.select:key,default}``, ``${key}``, ``${.sibling}``) are kept
verbatim as strings; :mod:`harness.verl.overrides` resolves them after the launcher's overrides
are merged, the way OmegaConf would. ``???`` (a mandatory value) is kept verbatim too.

Needs PyYAML (a development-time dependency only; the shipped JSON is read with ``json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FSDP_FILE = "_generated_ppo_trainer.yaml"
VEOMNI_FILE = "_generated_ppo_veomni_trainer.yaml"
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


def build(src_dir: Path) -> dict[str, Any]:
    fsdp = flatten(_load_yaml(src_dir / FSDP_FILE))
    veomni = flatten(_load_yaml(src_dir / VEOMNI_FILE))
    revision = (src_dir / "REVISION").read_text(encoding="utf-8").split()[0]
    keys = dict(fsdp)
    for key, value in veomni.items():
        keys.setdefault(key, value)
    differs = {k: v for k, v in veomni.items() if k not in fsdp or fsdp[k] != v}
    return {
        "_source": (f"Derived from verl (https://github.com/volcengine/verl, Apache-2.0) at revision {revision}: "
                    f"verl/trainer/config/{FSDP_FILE} and {VEOMNI_FILE}, the fully resolved default trainer "
                    "configs. Values are verl's defaults; ${...} strings are OmegaConf interpolations kept "
                    "verbatim; '???' marks a mandatory value."),
        "_generator": "python -m harness.verl.build_keys DIR (DIR holds the two yaml files and REVISION)",
        "revision": revision,
        "keys": dict(sorted(keys.items())),
        "veomni": dict(sorted(differs.items())),
        "only": {
            "fsdp": sorted(k for k in fsdp if k not in veomni),
            "veomni": sorted(k for k in veomni if k not in fsdp),
        },
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="folder with verl's generated trainer yaml files and REVISION")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.write_text(render(build(args.src)), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
