"""A run's ``report.html`` opened in a real headless browser: no console error, every image loads, the verdict's
table is there with every check.

Needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium chromium-driver``, which .ci/run
does) and selenium (the test extra). Selenium is handed the driver's path, so Selenium Manager never runs and
nothing is downloaded; the page is opened from disk (``file://``). Without them these tests skip with the reason,
unless HARNESS_REQUIRE_BROWSER=1 or CI=true, where a missing browser is a failure.

The run is synthetic (metrics, manifest, baseline and a failing verdict made here, as their records) and the page is rendered by
the harness's own ``write_run_report``: the same code ``harness run`` and ``harness report`` call.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.jsonio import file_sha256
from harness.judge.baseline import DEFAULT_POLICY, load_baseline
from harness.judge.report import write_run_report
from harness.records.base import dump
from harness.records.verdict import Verdict

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
STEPS = list(range(1, 9))
SCORE, VAL, TP = "critic/score/mean", "val-core/geo/reward/mean", "perf/throughput"


def _required() -> bool:
    return os.environ.get("HARNESS_REQUIRE_BROWSER") == "1" or os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [what for what, found in (("chromium (apt-get install chromium)", CHROMIUM),
                                        ("chromedriver (apt-get install chromium-driver)", CHROMEDRIVER)) if not found]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install -e .[test])")
    if missing:
        detail = f"no {', '.join(missing)}; .ci/run installs them"
        if _required():
            pytest.fail(f"CI / HARNESS_REQUIRE_BROWSER=1 needs a headless browser, but {detail}")
        pytest.skip(detail)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver: Any, page: Path) -> dict[str, Any]:
    """Load ``page`` and report what a reader would see go wrong: console errors, images, the checks' table."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # drop what an earlier page left
    driver.get(page.resolve().as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)"))
    images = driver.execute_script(
        "return Array.from(document.images).map(i => ({src: i.getAttribute('src'), width: i.naturalWidth}))")
    table = driver.execute_script("""
        const t = Array.from(document.querySelectorAll('table')).find(
            t => Array.from(t.querySelectorAll('thead th')).map(th => th.textContent).join(' ').includes('result'));
        if (!t) return null;
        return {header: Array.from(t.querySelectorAll('thead th')).map(th => th.textContent),
                rows: Array.from(t.querySelectorAll('tbody tr')).map(
                    tr => ({bad: tr.classList.contains('bad'), cells: Array.from(tr.cells).map(c => c.textContent)}))};
    """)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return {"images": images, "table": table, "errors": errors}


# ----------------------------------------------------------------------------- a synthetic, failing run
def _spec(values: list[float], steps: list[int], noise_std: float) -> dict[str, Any]:
    return {"tiers": ["exact", "band"], "steps": steps, "values": values, "noise_std": [noise_std] * len(values),
            "noise_values": [[v * f for v in values] for f in (0.9, 0.95, 0.97)], "direction": "higher-is-better"}


def _check(group: str, metric: str, step: int | None, passed: bool, failing: list[int] | None = None,
           detail: str = "", values: tuple[float, float, float] = (0.5, 0.4, 0.05)) -> dict[str, Any]:
    run, ref, tol = values
    return {"group": group, "metric": metric, "step": step, "run_value": run, "ref_value": ref, "tolerance": tol,
            "passed": passed, "steps_compared": len(STEPS), "failing_steps": failing or [], "detail": detail}


CHECKS = [
    _check("exact", SCORE, 3, False, [3, 4, 5, 6, 7, 8], "first difference at step 3"),
    _check("band", SCORE, 5, False, [5, 6], "2/8 steps outside the tolerance (allowed 0)"),
    _check("band", "actor/entropy", 8, True),
    _check("statistical", VAL, 8, False, [8], "off by 0.2"),
    _check("throughput", TP, None, False, detail="steady speed below the floor", values=(960.0, 1200.0, 180.0)),
    _check("memory", "perf/max_memory_allocated_gb", None, True),
]


SHA = "0" * 64


def _baseline_doc(metrics: dict[str, Any]) -> dict[str, Any]:
    """A baseline document that passes its schema (so the report draws its band), the synthetic metrics in it."""
    policy = dump(DEFAULT_POLICY)
    policy["band"].update(rtol=0.05, atol=1e-8, k_noise=3.0, noise_window=2)
    policy["throughput"].update(metric=TP, quantile=0.9, warmup_steps=2)
    return {"schema_version": 2, "recipe": {"name": "synthetic", "hash": SHA, "config_hash": SHA}, "profile": "cpu",
            "scale": "smoke", "architecture": {}, "dtype": "float32", "steps": len(STEPS),
            "created_utc": "2026-12-01T00:00:00Z", "command": "synthetic", "primary_seed": 42,
            "noise_seeds": [43, 44, 45], "environment": None, "policy": policy, "metrics": metrics,
            "throughput": {"references": []}, "memory": {"value": 1.0, "seed_values": [1.0], "relative_spread": 0.0},
            "runs": []}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    ref = [0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    baseline = _baseline_doc({SCORE: _spec(ref, STEPS, 0.3), VAL: _spec([0.3, 0.6, 1.0], [0, 4, 8], 0.5),
                              "actor/entropy": _spec([0.9 - 0.05 * k for k in STEPS], STEPS, 0.05),
                              "actor/kl_loss": _spec([0.01 * k for k in STEPS], STEPS, 0.02)})
    (root / "baseline.json").write_text(json.dumps(baseline))
    assert load_baseline(root / "baseline.json").metrics[SCORE].values == ref  # read by the report: its band drawn
    run_dir = root / "run"
    run_dir.mkdir()
    rows = [{"step": 0, VAL: 0.3}]
    for i, k in enumerate(STEPS):
        rows.append({"step": k, SCORE: ref[i] + (0.1 if k >= 5 else 0.0), "actor/entropy": 0.9 - 0.05 * k,
                     "actor/kl_loss": 0.01 * k, "actor/pg_loss": 0.02 * (-1) ** k, "actor/grad_norm": 1.0 / k,
                     TP: 900.0 + 10 * k, **({VAL: [0.6, 0.8][k // 4 - 1]} if k % 4 == 0 else {})})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "manifest.json").write_text(json.dumps({"recipe": "synthetic", "status": "complete"}))
    counts: dict[str, dict[str, int]] = {}
    for c in CHECKS:
        n = counts.setdefault(c["group"], {"checks": 0, "failed": 0})
        n["checks"] += 1
        n["failed"] += not c["passed"]
    verdict = Verdict.model_validate({
        "schema_version": 1, "status": "fail", "summary_line": "FAIL synthetic cpu:smoke tier=exact", "tier": "exact",
        "tier_reason": "same environment", "tiers_applied": ["exact", "band", "statistical"], "forced_tier": None,
        "run": {"dir": str(run_dir), "recipe": "synthetic", "profile": "cpu", "scale": "smoke", "seed": 42,
                "status": "complete", "steps_completed": len(STEPS)},
        "baseline": {"path": str(root / "baseline.json"), "sha256": file_sha256(root / "baseline.json"),
                     "primary_seed": 42, "noise_seeds": [43, 44, 45], "steps": len(STEPS),
                     "steps_compared": len(STEPS)},
        "policy": baseline["policy"], "overrides": [], "fault_injection": None, "created_utc": "2026-12-02T00:00:00Z",
        "counts": counts, "reasons": ["exact: critic/score/mean differs from step 3"], "notices": [], "changes": [],
        "checks": CHECKS})
    write_run_report(run_dir, verdict)
    return run_dir / "report.html"


# ----------------------------------------------------------------------------- the checks
def test_the_report_reads_in_a_browser(browser: Any, report: Path) -> None:
    seen = open_page(browser, report)
    assert seen["errors"] == [], seen["errors"]
    srcs = sorted(i["src"] for i in seen["images"])
    assert srcs == sorted(f"curves-{s}.png" for s in ("reward", "loss", "kl", "entropy", "grad-norm", "throughput"))
    assert all(i["width"] > 0 for i in seen["images"]), seen["images"]
    table = seen["table"]
    assert table is not None and table["header"][:2] == ["group", "metric"] and table["header"][-2] == "result"
    assert len(table["rows"]) == len(CHECKS)
    failed = [r for r in table["rows"] if r["bad"]]
    assert len(failed) == sum(not c["passed"] for c in CHECKS)
    assert all("FAIL" in r["cells"] for r in failed) and failed == table["rows"][:len(failed)]  # failures first


def test_a_broken_image_is_caught(browser: Any, report: Path, tmp_path: Path) -> None:
    """The check is not vacuous: a report whose curve file is missing fails it (a console error, width 0)."""
    copy = tmp_path / "run"
    shutil.copytree(report.parent, copy)
    (copy / "curves-kl.png").unlink()
    seen = open_page(browser, copy / "report.html")
    assert [i["src"] for i in seen["images"] if i["width"] == 0] == ["curves-kl.png"]
    assert any("curves-kl.png" in e["message"] for e in seen["errors"]), seen["errors"]
