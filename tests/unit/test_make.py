"""What `make` does with the harness's exit codes. GNU make exits 2 whenever a
recipe fails, whatever the recipe's own code, so `make ladder-check` can only
be 0 or 2; what it can do, and must, is fail exactly when the harness does and
say the harness's real code. These tests pin both, and that every harness run
in the Makefile goes through the wrapper that says it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ladder"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    # Not the outer make's flags or jobserver when this runs under `make unit-test`;
    # PY is this interpreter, so make never tries to build .venv.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    }
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args, f"PY={sys.executable}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture
def ladder_files(tmp_path: Path) -> dict[str, Path]:
    fixed = (EXAMPLES / "spot-notice-ladder-fixed.yaml").read_text()
    unknown = tmp_path / "unknown.yaml"
    # Without the LB's deregistration time ordering G can only be unknown.
    unknown.write_text(fixed.replace("load_balancer:\n  deregistration: 2s\n", ""))
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text("node_env: [\n")
    return {
        "pass": EXAMPLES / "spot-notice-ladder-fixed.yaml",
        "fail": EXAMPLES / "spot-notice-ladder.yaml",
        "unknown": unknown,
        "malformed": malformed,
    }


@pytest.mark.parametrize(
    "case, harness_code", [("pass", 0), ("fail", 1), ("unknown", 3), ("malformed", 2)]
)
def test_ladder_check_through_make(ladder_files, case: str, harness_code: int) -> None:
    path = ladder_files[case]
    direct = subprocess.run(
        [sys.executable, "-m", "harness", "ladder", "check", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert direct.returncode == harness_code, direct.stderr

    run = _make("ladder-check", f"FILE={path}")
    # GNU make's own status: 0, or 2 for any failed recipe.
    assert run.returncode == (0 if harness_code == 0 else 2), run.stderr
    if harness_code:
        assert f"make ladder-check: the harness exited {harness_code} (" in run.stderr
        assert f"run: {sys.executable} -m harness ladder check {path}" in run.stderr
        assert "[Makefile:" in run.stderr and f"ladder-check] Error {harness_code}" in run.stderr
    else:
        assert "the harness exited" not in run.stderr


def test_ladder_check_without_file_is_usage(ladder_files) -> None:
    run = _make("ladder-check")
    assert run.returncode == 2 and "usage: make ladder-check FILE=" in run.stderr


def test_every_harness_run_in_the_makefile_reports_its_code() -> None:
    recipes = [
        line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")
    ]
    runs = [
        line
        for line in recipes
        if re.search(r"\$\(HARNESS\)|-m harness\b", line) and "usage:" not in line
    ]
    assert len(runs) >= 15
    for line in runs:
        assert "$(call harness_run," in line or "$(call harness_rc," in line, line


def test_export_check_without_a_workspace_through_make(monkeypatch, tmp_path: Path) -> None:
    # An empty build folder: there is no workspace to check, whatever this machine has.
    monkeypatch.setenv("HARNESS_BUILD_DIR", str(tmp_path))
    run = _make("export-patches", "CHECK=1")
    assert run.returncode == 2, run.stderr
    assert f"{tmp_path / 'ray-src'} does not exist; run `make workspace` first" in run.stderr
    assert "make export-patches: the harness exited 2 (bad usage or input)" in run.stderr
    assert "-m harness patches export --check" in run.stdout
    assert list(tmp_path.iterdir()) == []


def test_help_lists_the_patch_checks() -> None:
    listed = _make("help").stdout
    assert "CHECK=1" in listed
    assert re.search(r"^check-patches\s+fail unless patches/", listed, re.M)


def test_help_lists_the_targets_then_every_scenario() -> None:
    from harness.scenarios import scenario_list

    run = _make("help")
    assert run.returncode == 0, run.stderr
    listed = run.stdout
    # The targets as before, each with its line, then the harness's scenario list whole.
    assert re.search(r"^help\s+list the targets", listed, re.M)
    assert re.search(r"^clean\s+remove build/", listed, re.M)
    scenarios = scenario_list()
    assert scenarios in listed
    assert listed.index("clean ") < listed.index(scenarios)
    assert f"{sys.executable} -m harness scenarios" in listed


def test_help_without_a_venv_still_lists_the_targets(tmp_path: Path) -> None:
    # A fresh clone: `make help` must not start a set-up to list the scenarios.
    missing = tmp_path / "no-venv" / "python"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    }
    run = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "help", f"PY={missing}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"^setup\s+create \.venv", run.stdout, re.M)
    assert f"(listed once {missing} exists: make setup)" in run.stdout
    assert not missing.parent.exists()
