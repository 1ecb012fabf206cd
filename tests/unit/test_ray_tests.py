"""`upstream tests`: Ray's own test files on the stock and the patched tree,
flags off and on, on a fake wheel and series, so each verdict is known."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_upstream import env, git, make_series, wheel, write_files  # noqa: F401

from harness.core.errors import HarnessError
from harness.upstream import ray_tests
from harness.upstream.ray_tests import Manifest, UpstreamFile
from harness.upstream.testenv import TestEnv

ROUTER = "ray/serve/_private/router.py"
CONSTANTS = "ray/serve/_private/constants.py"
TEST_ROUTE = "python/ray/serve/tests/unit/test_route.py"
HELPER = "python/ray/serve/tests/unit/route_helper.py"

# Ray's test file: one test the series keeps passing only with its flag off,
# one that passes on stock and patched alike, one that fails on stock too.
UPSTREAM = {
    TEST_ROUTE: (
        "from ray.serve._private import router\n"
        "from ray.serve.tests.unit.route_helper import EXPECTED\n\n\n"
        "def test_route():\n    assert router.ROUTE == EXPECTED\n\n\n"
        "def test_import():\n    assert router is not None\n\n\n"
        "class TestBroken:\n    def test_fails_on_stock_too(self):\n        assert False\n"
    ),
    HELPER: "EXPECTED = 'first'\n",
}
FLAGGED = (
    "[Serve] Route differently behind a flag\n",
    {
        CONSTANTS: 'X = get_env_bool(\n    "RAY_SERVE_NEW_ROUTE", "0"\n)\n',
        ROUTER: "import os\n\n"
        "ROUTE = 'other' if os.environ.get('RAY_SERVE_NEW_ROUTE') == '1' else 'first'\n",
    },
)
CLEAN = ("[Serve] Touch the router\n", {ROUTER: "ROUTE = 'first'  # unchanged\n"})


def manifest_for(root: Path, files: dict[str, str] = UPSTREAM) -> Manifest:
    write_files(root, files)
    entries = [
        UpstreamFile(
            path=rel,
            commit="a" * 40,
            sha256=hashlib.sha256(text.encode()).hexdigest(),
            covers="router.py",
            run=Path(rel).name.startswith("test_"),
        )
        for rel, text in files.items()
    ]
    return Manifest(entries, [], [])


def run(tmp_path: Path, env: TestEnv, wheel: Path, steps) -> ray_tests.RayTestsReport:  # noqa: F811
    patches = make_series(tmp_path / "series", steps)
    files = tmp_path / "upstream-tests"
    return ray_tests.run_ray_tests(env, wheel, patches, manifest_for(files), files)


def test_a_test_broken_only_with_the_flag_on_is_a_regression(
    tmp_path: Path,
    env: TestEnv,  # noqa: F811
    wheel: Path,  # noqa: F811
) -> None:
    report = run(tmp_path, env, wheel, [FLAGGED])
    assert report.flags == {"RAY_SERVE_NEW_ROUTE": "0"}
    regressions = report.regressions()
    route = "ray/serve/tests/unit/test_route.py::test_route"
    assert regressions == {"patched, flags off": [], "patched, flags on": [route]}
    assert not report.ok
    text = report.format()
    assert "1 regression(s), patched, flags on:" in text
    assert f"{route}: failed" in text
    # The stock failure is the baseline's, never a regression.
    broken = "ray/serve/tests/unit/test_route.py::TestBroken::test_fails_on_stock_too"
    assert report.runs["stock"].outcomes[broken] == "failed"
    assert broken not in regressions["patched, flags on"]


def test_a_series_that_keeps_every_test_passes(
    tmp_path: Path,
    env: TestEnv,  # noqa: F811
    wheel: Path,  # noqa: F811
) -> None:
    report = run(tmp_path, env, wheel, [CLEAN])
    assert report.ok
    assert report.flags == {}
    counts = {
        name: str(run.counts(["ray/serve/tests/unit/test_route.py"]))
        for name, run in report.runs.items()
    }
    assert counts == dict.fromkeys(
        ["stock", "patched, flags off", "patched, flags on"], "2 passed, 1 failed"
    )
    assert "no regressions" in report.format()


def test_series_flags_are_the_boolean_settings_it_adds(tmp_path: Path) -> None:
    patches = make_series(
        tmp_path,
        [
            FLAGGED,
            (
                "[Serve] Two more settings\n",
                {
                    CONSTANTS: 'X = get_env_bool(\n    "RAY_SERVE_NEW_ROUTE", "0"\n)\n'
                    'Y = get_env_bool("RAY_SERVE_ON_BY_DEFAULT", "1")\n'
                    'Z = get_env_int("RAY_SERVE_A_NUMBER", 3)\n',
                },
            ),
        ],
    )
    assert ray_tests.series_flags(patches) == {
        "RAY_SERVE_NEW_ROUTE": "0",
        "RAY_SERVE_ON_BY_DEFAULT": "1",
    }


def test_missing_and_changed_files_are_named_with_how_to_fetch(tmp_path: Path) -> None:
    manifest = manifest_for(tmp_path)
    (tmp_path / HELPER).write_text("EXPECTED = 'edited'\n")
    (tmp_path / TEST_ROUTE).unlink()
    with pytest.raises(HarnessError) as error:
        ray_tests.check_files(manifest.files, tmp_path)
    message = str(error.value)
    assert f"{TEST_ROUTE}: missing" in message
    assert f"{HELPER}: sha256 differs from aaaaaaaaaaaa's" in message
    assert "--fetch-from /path/to/ray" in message
    assert f"ray-project/ray/{'a' * 40}/{TEST_ROUTE}" in message
    assert error.value.exit_code == 2


def clone_with(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A git repository standing in for a clone of Ray's, holding `files` in
    one commit; returns it and that commit."""
    clone = tmp_path / "ray"
    clone.mkdir()
    git(clone, "init", "-q", "-b", "master")
    write_files(clone, files)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "tests")
    return clone, git(clone, "rev-parse", "HEAD")


def upstream_files_at(tmp_path: Path, commit: str) -> list[UpstreamFile]:
    """UPSTREAM's files as the manifest records them, taken at `commit`."""
    manifest = manifest_for(tmp_path / "expected")
    return [UpstreamFile(f.path, commit, f.sha256, f.covers, f.run) for f in manifest.files]


def test_fetched_from_a_clone_at_each_files_commit(tmp_path: Path) -> None:
    clone, commit = clone_with(tmp_path, UPSTREAM)
    # A later commit changes a file: the manifest's commit is what is fetched.
    (clone / HELPER).write_text("EXPECTED = 'later'\n")
    git(clone, "commit", "-q", "-am", "later")
    files = upstream_files_at(tmp_path, commit)
    dest = tmp_path / "fetched"
    ray_tests.fetch_from_checkout(files, clone, dest)
    assert ray_tests.problems(files, dest) == []
    assert (dest / HELPER).read_text() == UPSTREAM[HELPER]


def test_a_clone_with_other_contents_writes_nothing(tmp_path: Path) -> None:
    clone, commit = clone_with(tmp_path, dict.fromkeys(UPSTREAM, "# not Ray's file\n"))
    files = upstream_files_at(tmp_path, commit)
    dest = tmp_path / "fetched"
    with pytest.raises(HarnessError, match="Nothing was written"):
        ray_tests.fetch_from_checkout(files, clone, dest)
    assert not dest.exists()


def test_the_committed_manifest_reads_and_pins_its_requirements() -> None:
    manifest = ray_tests.load_manifest()
    assert any(f.run for f in manifest.files)
    assert all(len(f.commit) == 40 and len(f.sha256) == 64 for f in manifest.files)
    assert all(f.site_path.startswith("ray/serve/tests/") for f in manifest.files)
    assert all("==" in r for r in manifest.requirements)
