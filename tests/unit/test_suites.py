"""Every certification suite can pass on hardware nobody here has: each names baselines that exist (with recorded
rollouts where it replays them), and every profile's reference_profile is a shipped profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.paths import PROFILES_DIR, ROOT, SUITES_DIR

SUITES = sorted(SUITES_DIR.glob("*.json"))


@pytest.mark.parametrize("suite", SUITES, ids=[p.stem for p in SUITES])
def test_every_suite_names_baselines_that_exist(suite: Path) -> None:
    doc = json.loads(suite.read_text())
    assert doc["entries"]
    for entry in doc["entries"]:
        ref = ROOT / entry["numerics"]["reference_baseline"]
        assert ref.is_file(), f"{suite.name}: entry {entry['id']} names {ref.relative_to(ROOT)}, which does not exist"
        if entry["numerics"]["tier"] == "replay":
            baseline = json.loads(ref.read_text())
            assert baseline.get("replay"), f"{suite.name}: {entry['id']} replays {ref.name}, which kept no rollouts"
            assert (ref.parent / Path(baseline["replay"]["file"]).name).is_file()


def test_reference_profiles_are_shipped_one_device_profiles() -> None:
    for path in sorted(PROFILES_DIR.glob("*.json")):
        ref = json.loads(path.read_text()).get("reference_profile")
        if ref is not None:
            target = json.loads((PROFILES_DIR / f"{ref}.json").read_text())
            assert target["accelerator"]["count_per_node"] == 1 and target["nodes"] == 1, (path.name, ref)
