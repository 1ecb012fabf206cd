"""Unit tests for harness.patches.overlay and harness.patches.mutation, on a tiny
fake installed `ray` under tmp_path. The mutated tests really run, with this
interpreter's pytest, through overlays; the installed tree must come out
exactly as it went in. No network, no Docker."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.patches import mutation
from harness.patches.mutation import Mutation, format_table, run_mutations
from harness.patches.overlay import serve_overlay

FLAGS = "ray/serve/_private/flags.py"
TESTS = "ray/serve/tests/unit/test_flags.py"

# Each fake test records what it imported into $MUTATION_TEST_RECORDS, one file
# per run, so a test can see which tree a run saw. A mutated run (a flag of 0)
# first waits until two mutated runs have started: with two at a time they
# meet; one at a time, the first gives up after its wait and still records.
TEST_FLAGS = """\
import os
import time
from pathlib import Path

import ray.serve
import ray.util
from ray.serve._private import flags

RECORDS = Path(os.environ["MUTATION_TEST_RECORDS"])


def test_0_record():
    name = f"{flags.A}{flags.B}"
    met = False
    if name != "11":
        (RECORDS / f"started-{name}").touch()
        deadline = time.monotonic() + float(os.environ["MUTATION_TEST_MEET_S"])
        while time.monotonic() < deadline and not met:
            met = len(list(RECORDS.glob("started-*"))) >= 2
            time.sleep(0.05)
    (RECORDS / f"run-{name}").write_text(
        f"{ray.serve.__file__}\\n{Path(ray.util.__file__).resolve()}\\n{met}\\n"
    )


def test_a():
    assert flags.A == 1


def test_b():
    assert flags.B == 1
"""

INSTALLED = {
    "ray/__init__.py": "",
    "ray/util.py": "HELPER = 1\n",
    "ray/serve/__init__.py": "",
    "ray/serve/_private/__init__.py": "",
    FLAGS: "A = 1\nB = 1\n",
    TESTS: TEST_FLAGS,
}

MUTATE_A = Mutation("flag a", FLAGS, "A = 1\n", "A = 0\n")
MUTATE_B = Mutation("flag b", FLAGS, "B = 1\n", "B = 0\n")


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `root` with its bytes and mtime: anything written, added
    or touched shows."""
    return {
        path.relative_to(root).as_posix(): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    write_files(site, INSTALLED)
    # Bytecode that Python takes without looking at the source: were it copied
    # beside a mutated file, the run would not see the mutation.
    source = site / FLAGS
    py_compile.compile(
        str(source),
        cfile=importlib.util.cache_from_source(str(source)),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    # Dated well in the past, so that any write would change a file's mtime.
    for path in site.rglob("*"):
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return site


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    records = tmp_path / "records"
    records.mkdir()
    monkeypatch.setenv("MUTATION_TEST_RECORDS", str(records))
    monkeypatch.setenv("MUTATION_TEST_MEET_S", "20")
    # Overlays go into a folder of the test's own, so that none is left behind.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    return records


def run(site: Path, mutations: list[Mutation], jobs: int) -> list[mutation.MutationResult]:
    return run_mutations(
        site, [str(site / TESTS)], python=Path(sys.executable), jobs=jobs, mutations=mutations
    )


def record(records: Path, name: str) -> tuple[Path, Path, bool]:
    serve, util, met = (records / f"run-{name}").read_text().splitlines()
    return Path(serve), Path(util), met == "True"


# ------------------------------------------------------------ the overlay


def test_overlay_changes_exactly_the_replaced_file(site: Path, tmp_path: Path) -> None:
    before = snapshot(site)
    compiled = Path(importlib.util.cache_from_source(FLAGS)).relative_to("ray/serve").as_posix()
    replaced = {FLAGS: "A = 0\nB = 1\n"}
    installed = snapshot(site / "ray" / "serve")
    with serve_overlay(
        site, site / "ray" / "serve", tmp_path, replacing=replaced, bytecode=True
    ) as root:
        copy = snapshot(root / "ray" / "serve")
        # The one file replaced, and the bytecode of what it replaced dropped.
        assert installed.keys() - copy.keys() == {compiled}
        assert copy.keys() <= installed.keys()
        assert [rel for rel in copy if copy[rel] != installed[rel]] == ["_private/flags.py"]
        assert (root / FLAGS).read_text() == "A = 0\nB = 1\n"
        assert not any(p.is_symlink() for p in (root / "ray" / "serve").rglob("*"))
        # The rest of `ray` is the installed package itself, linked, not copied.
        others = sorted(p.name for p in (root / "ray").iterdir() if p.name != "serve")
        assert others == ["__init__.py", "util.py"]
        for name in others:
            assert (root / "ray" / name).readlink() == site / "ray" / name
    assert not root.exists()
    # Without `bytecode` (the upstream test runs) no bytecode is copied at all.
    with serve_overlay(site, site / "ray" / "serve", tmp_path) as root:
        copy = snapshot(root / "ray" / "serve")
        assert copy == {rel: installed[rel] for rel in installed if rel != compiled}
    assert snapshot(site) == before


def test_overlay_refuses_a_file_outside_the_serve_copy(site: Path, tmp_path: Path) -> None:
    before = snapshot(site)
    for rel in ("ray/util.py", "ray/serve/../util.py", "ray/serve/_private/none.py"):
        with pytest.raises(HarnessError, match=r"ray/"):
            with serve_overlay(site, site / "ray" / "serve", tmp_path, replacing={rel: "X = 0\n"}):
                pass
    assert snapshot(site) == before
    assert list(tmp_path.glob("overlay-*")) == []


# ------------------------------------------------------------ the mutation check


def test_concurrent_mutations_see_only_their_own_edit(
    site: Path, records: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(site)
    results = run(site, [MUTATE_A, MUTATE_B], jobs=2)

    assert [(r.name, r.caught) for r in results] == [("flag a", True), ("flag b", True)]
    assert [r.failed_tests[0].rsplit("::", 1)[-1] for r in results] == ["test_a", "test_b"]
    # The baseline saw neither edit, each mutated run only its own, and the two
    # mutated runs were going at the same time.
    seen = {name: record(records, name) for name in ("11", "01", "10")}
    assert not (records / "run-00").exists()
    assert seen["01"][2] and seen["10"][2]
    # Every run imported `ray.serve` from an overlay of its own, and the rest of
    # Ray from the installed tree.
    serves = {serve.parents[1] for serve, _, _ in seen.values()}
    assert len(serves) == 3
    assert not any(site in serve.parents for serve in serves)
    assert {util for _, util, _ in seen.values()} == {site / "ray" / "util.py"}

    assert snapshot(site) == before
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []
    # Progress lines are log lines, on stderr.
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mutation")]
    assert lines[0] == "mutation: baseline, unmutated"
    assert [line.rsplit(" (", 1)[0] for line in lines[1:]] == [
        f"mutation: 1/2 flag a ({FLAGS})",
        f"mutation: 2/2 flag b ({FLAGS})",
    ]
    assert format_table(results).endswith("2 of 2 mutations caught")


def test_results_keep_the_order_of_the_mutations(site: Path, records: Path) -> None:
    survivor = Mutation("unused flag", FLAGS, "B = 1\n", "B = 1  # unchanged\n")
    mutations = [MUTATE_B, survivor, MUTATE_A]
    results = run(site, mutations, jobs=3)
    assert [(r.name, r.caught) for r in results] == [
        ("flag b", True),
        ("unused flag", False),
        ("flag a", True),
    ]
    assert "SURVIVED" in format_table(results)


def test_a_hung_run_is_killed_and_counts_as_caught(
    site: Path, records: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Killed one second past the baseline's time, not minutes.
    monkeypatch.setattr(mutation, "_HANG_FACTOR", 1)
    monkeypatch.setattr(mutation, "_HANG_MARGIN_S", 1.0)
    before = snapshot(site)
    hang = Mutation("flag a hangs", FLAGS, "A = 1\n", "import time\ntime.sleep(120)\nA = 1\n")
    (result,) = run(site, [hang], jobs=2)
    assert result.caught
    assert result.failed_tests[0].startswith("(tests hung: killed after")
    assert result.duration_s < 60
    assert snapshot(site) == before


def test_a_missing_snippet_runs_nothing(site: Path, records: Path) -> None:
    before = snapshot(site)
    gone = Mutation("gone", FLAGS, "C = 1\n", "C = 0\n")
    with pytest.raises(HarnessError, match=r"mutation 'gone': its snippet is not in"):
        run(site, [MUTATE_A, gone], jobs=2)
    assert list(records.iterdir()) == []
    assert snapshot(site) == before


def test_a_mutation_that_breaks_collection_is_an_error(site: Path, records: Path) -> None:
    before = snapshot(site)
    broken = Mutation("broken", FLAGS, "A = 1\n", "A = (\n")
    with pytest.raises(HarnessError, match=r"mutation 'broken': pytest exited 2"):
        run(site, [broken, MUTATE_B], jobs=1)
    # One at a time, the error stops the check before the next mutation.
    assert not (records / "run-10").exists()
    assert snapshot(site) == before
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []


def test_jobs_must_be_one_or_more(capsys: pytest.CaptureFixture[str]) -> None:
    for value in ("0", "two"):
        with pytest.raises(SystemExit) as exit_info:
            mutation.main(["--jobs", value])
        assert exit_info.value.code == 2
        assert "--jobs: must be a whole number of runs" in capsys.readouterr().err


def test_a_mutated_run_starts_with_its_files_own_tests() -> None:
    # With -x a run stops at its first failure, so the likeliest catcher goes
    # first; the same tests run, in the same order otherwise.
    args = ["-k", "push", "tests/test_metrics_push_bound.py", "tests/test_push_health_sender.py::t"]
    replica = "ray/serve/_private/replica.py"
    assert mutation._own_tests_first(args, replica) == [
        "tests/test_push_health_sender.py::t",
        "-k",
        "push",
        "tests/test_metrics_push_bound.py",
    ]
    assert mutation._own_tests_first(args, "ray/serve/_private/other.py") == args
    assert set(mutation._TESTED_FIRST_BY) == {m.path for m in mutation.MUTATIONS}
