"""The CPU numerics pin: set before torch starts, recorded, lifted on request, and decisive for exactness."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import numerics
from harness.paths import ROOT

PROBE = ("import json; from harness import numerics; numerics.apply_env(); import torch; numerics.activate(); "
         "print(json.dumps(numerics.record()))")


def _probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in numerics.PIN_ENV}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, "PYTHONPATH": str(ROOT), **env},
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


pinnable = pytest.mark.skipif(not numerics.supported("avx2")[0], reason="needs an x86-64 CPU with AVX2 and FMA")


@pinnable
def test_pin_takes_effect_in_a_fresh_process():
    rec = _probe()
    assert rec["level"] == "avx2" and rec["reason"] == "pinned"
    assert rec["cpu_capability"] == "AVX2" and rec["threads"] == numerics.CPU_THREADS
    assert rec["env"]["MKL_CBWR"] == "COMPATIBLE" and rec["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_native_lifts_the_pin():
    rec = _probe(HARNESS_CPU_ISA="native")
    assert rec["level"] == "native" and "native" in rec["reason"] and rec["env"] == {}
    assert numerics.exactness_key(rec) is None


@pinnable
def test_a_user_setting_is_kept_and_named():
    rec = _probe(OMP_NUM_THREADS="1")
    assert rec["level"] == "avx2" and rec["threads"] == 1 and "OMP_NUM_THREADS=1" in rec["reason"]
    assert numerics.exactness_key(rec) != numerics.exactness_key(_probe())  # another thread count: other bits


def test_unknown_level_runs_unpinned():
    assert numerics.supported("avx9")[0] is False
    assert _probe(HARNESS_CPU_ISA="avx9")["level"] == "native"


def test_every_pin_variable_is_recorded_in_manifests():
    from harness.core.device import NUMERICS_ENV

    assert set(numerics.PIN_ENV) <= set(NUMERICS_ENV)
