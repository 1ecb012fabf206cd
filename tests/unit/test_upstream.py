"""Unit tests for harness.upstream: stacked PR branches, rebase-check and the PR
body, on a tiny fake wheel, fake patch series and fake Ray install under
tmp_path. The patches' tests really run, with this interpreter's pytest. No
network, no Docker."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from pinned_tree import COMMIT as PIN_COMMIT
from pinned_tree import RELEASE, REPLICA, ROUTER, isolate_git

from harness.core.errors import HarnessError
from harness.core.pin import RayRelease, read_series
from harness.experiment.checker import check
from harness.experiment.history import History, Request
from harness.experiment.report import write_report
from harness.patches.checkout import at_the_pin
from harness.patches.workspace import export_workspace
from harness.upstream import prbody
from harness.upstream.branches import (
    branch_name,
    branch_names,
    build_standin,
    patch_message,
    pr_branches,
    series_stacks,
    stack_paragraph,
)
from harness.upstream.evidence import load_evidence
from harness.upstream.prbody import pr_body
from harness.upstream.rebase import rebase_check
from harness.upstream.stacks import check_stacks
from harness.upstream.testenv import TestEnv, patch_tests, run_tests

TEST_ONE = "ray/serve/tests/unit/test_drain.py"
TEST_TWO = "ray/serve/tests/unit/test_router.py"


def lines(**changes: str) -> str:
    """replica.py: `LINE_i = i` for i in 1..30, with some lines replaced."""
    return "".join(changes.get(f"l{i}", f"LINE_{i} = {i}") + "\n" for i in range(1, 31))


SERVE_FILES = {
    "ray/serve/__init__.py": "",
    "ray/serve/_private/__init__.py": "",
    "ray/serve/api.py": "def run(app):\n    return app\n",
    REPLICA: lines(),
    ROUTER: "ROUTE = 'first'\n",
}

# The series: each step is (message, changes) made on top of the one before.
# The tests import the serve tree, so they pass only on the patched overlay.
STEP_1 = (
    "[Serve] Drain replicas in two phases\n\nStop routing first.\n",
    {
        REPLICA: lines(l5="LINE_5 = 'drained'"),
        TEST_ONE: "import ray.util\nfrom ray.serve._private import replica\n\n\n"
        "def test_line_5_is_patched():\n    assert replica.LINE_5 == 'drained'\n"
        "    assert ray.util.HELPER == 1  # the installed Ray, under the overlay\n",
    },
)
STEP_2 = (
    '[Serve] Router skips draining replicas\n\nStacked on "Drain replicas in two phases".\n',
    {
        REPLICA: lines(l5="LINE_5 = 'drained'", l20="LINE_20 = 'a'", l24="LINE_24 = 'b'"),
        ROUTER: "ROUTE = 'skip-draining'\n",
        TEST_TWO: "from ray.serve._private import router\n\n\n"
        "def test_router():\n    assert router.ROUTE == 'skip-draining'\n",
    },
)
STEP_3 = (
    "[Serve] Retune line 12\n",
    {
        REPLICA: lines(
            l5="LINE_5 = 'drained'",
            l20="LINE_20 = 'a'",
            l24="LINE_24 = 'b'",
            l12="LINE_12 = 'tuned'",
        ),
    },
)
STEP_4 = ("[Serve] Rename the API\n", {"ray/serve/api.py": "def run_app(app):\n    return app\n"})


@pytest.fixture(autouse=True)
def _git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    # pr_branches commits with the user's git config; make it the same for everyone.
    isolate_git(monkeypatch)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def fake_wheel(path: Path, changes: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for rel, text in {**SERVE_FILES, **(changes or {})}.items():
            archive.writestr(rel, text)
        archive.writestr("ray/_version.py", 'version = "2.60.0"\n')
    return path


def make_series(root: Path, steps: list[tuple[str, dict[str, str]]]) -> list[Path]:
    """The steps as `git format-patch` files, made the way the workspace makes them."""
    repo = root / "src"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    write_files(repo / "python", SERVE_FILES)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "base")
    for message, changes in steps:
        write_files(repo / "python", changes)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message)
    return export_workspace(repo, root / "patches")


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return fake_wheel(tmp_path / "ray-2.60.0.whl")


@pytest.fixture
def env(tmp_path: Path) -> TestEnv:
    """A fake Ray install whose serve tree must never be the one tested."""
    site = tmp_path / "site"
    write_files(
        site,
        {
            "ray/__init__.py": "",
            "ray/_version.py": f'version = "2.60.0"\ncommit = "{PIN_COMMIT}"\n',
            "ray/util.py": "HELPER = 1\n",
            "ray/serve/__init__.py": "raise ImportError('the installed serve tree was imported')\n",
        },
    )
    return TestEnv(Path(sys.executable), site)


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def assert_untouched(repo: Path, head: str) -> None:
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1


# ------------------------------------------------------------ branch names


def test_branch_names_come_from_the_real_subjects() -> None:
    subjects = [patch_message(p)[0] for p in read_series()]
    names = [branch_name(s) for s in subjects]
    assert names[:3] == [
        "serve/haproxy-count-server-up-n-m-as-up",
        "serve/push-based-replica-health-controller-side-receive-path",
        "serve/push-based-replica-health-replica-self-checks-batched-per",
    ]
    assert len(set(names)) == len(names)
    for name in names:
        subprocess.run(
            ["git", "check-ref-format", "--branch", name], check=True, capture_output=True
        )


def test_branch_name_rules() -> None:
    assert branch_name("Fix the thing") == "patch/fix-thing"
    assert branch_name("[Core] [Serve] x") == "core/serve-x"
    long = branch_name("[Serve] " + " ".join(["word"] * 30))
    assert len(long.split("/", 1)[1]) <= 60 and not long.endswith("-")


def test_two_patches_with_one_subject_get_their_numbers(tmp_path: Path) -> None:
    (first,) = make_series(tmp_path / "a", [STEP_4])
    twin = tmp_path / "0002-Serve-Rename-the-API.patch"
    twin.write_bytes(first.read_bytes())
    assert branch_names([first, twin]) == ["serve/rename-api-0001", "serve/rename-api-0002"]


# ------------------------------------------------------------ pr-branches


def test_stand_in_is_recognised_as_the_pin(tmp_path: Path, wheel: Path) -> None:
    standin = build_standin(wheel, tmp_path / "ray")
    head, why = at_the_pin(standin, RELEASE, wheel)
    assert head == git(standin, "rev-parse", "HEAD") and "stand-in" in why


def test_standin_verb_takes_a_relative_dir(
    monkeypatch, capsys, tmp_path: Path, wheel: Path
) -> None:
    import signal

    import harness.cli as cli
    import harness.core.wheels

    monkeypatch.setattr(harness.core.wheels, "ensure_wheelhouse", lambda release: wheel.parent)
    monkeypatch.setattr(harness.core.wheels, "verify_ray_wheel", lambda house, release: wheel)
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(["upstream", "standin", "out/ray"]) == 0
    finally:
        signal.signal(signal.SIGTERM, before)
    standin = tmp_path / "out" / "ray"
    assert git(standin, "rev-parse", "--show-toplevel") == str(standin)
    assert at_the_pin(standin, RELEASE, wheel)[1].startswith("a stand-in")
    # The path it prints for RAY_SRC works from wherever make runs.
    assert f"RAY_SRC={standin}`" in capsys.readouterr().out


def test_build_standin_takes_a_relative_dir(monkeypatch, tmp_path: Path, wheel: Path) -> None:
    # git runs inside the new tree; a relative path must not be read from there.
    monkeypatch.chdir(tmp_path)
    build_standin(wheel, Path("relative"))
    assert at_the_pin(tmp_path / "relative", RELEASE, wheel)[1].startswith("a stand-in")


def test_each_branch_is_its_stack_and_itself_and_is_tested(
    tmp_path: Path, wheel: Path, env: TestEnv
) -> None:
    series = make_series(tmp_path, [STEP_1, STEP_2, STEP_4])
    repo = build_standin(wheel, tmp_path / "ray")
    head = git(repo, "rev-parse", "HEAD")
    result = pr_branches(repo, series, RELEASE, wheel, env)

    first, second = "serve/drain-replicas-two-phases", "serve/router-skips-draining-replicas"
    third = "serve/rename-api"
    assert [r.name for r in result.rows] == [first, second, third]
    assert git(repo, "rev-parse", f"{first}^") == head
    # The second names the first as its stack: the pin, the first, then itself.
    assert git(repo, "rev-parse", f"{second}^^") == head
    assert git(repo, "log", "-1", "--format=%s", f"{second}^") == (
        "[Serve] Drain replicas in two phases"
    )
    # The third names no stack: the pin and itself, none of the others.
    assert git(repo, "rev-parse", f"{third}^") == head
    assert git(repo, "log", "-1", "--format=%s%n%b", first).startswith(
        "[Serve] Drain replicas in two phases\nStop routing first."
    )
    assert git(repo, "log", "-1", "--format=%an", second) == "Zoë Developer"
    for branch in (first, second):
        assert git(repo, "log", "-1", "--format=%(trailers:key=Signed-off-by,valueonly)", branch)
        assert git(repo, "log", "-1", "--format=%ae", branch) == "zoe@users.noreply.github.com"
    assert_untouched(repo, head)
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    # Each branch ran its own tests and those of its stack.
    one, two, three = result.rows
    assert (one.applies, str(one.tests)) == ("clean", "own 1 passed")
    assert (two.applies, str(two.tests)) == ("clean", "own 1 passed; earlier 1 passed")
    assert three.applies == "clean" and three.tests is not None and three.tests.run is None
    assert not result.failed


def test_a_failing_test_is_reported_and_the_branches_stay(
    tmp_path: Path, wheel: Path, env: TestEnv
) -> None:
    broken = (STEP_2[0], {**STEP_2[1], TEST_TWO: "def test_router():\n    assert False\n"})
    series = make_series(tmp_path, [STEP_1, broken])
    repo = build_standin(wheel, tmp_path / "ray")
    result = pr_branches(repo, series, RELEASE, wheel, env)
    assert [r.name for r in result.failed] == ["serve/router-skips-draining-replicas"]
    assert str(result.rows[1].tests) == "own 1 failed; earlier 1 passed"
    assert "test_router" in result.format()
    assert len(branches(repo)) == 3


def test_pinned_commit_counts_even_when_the_tree_is_not_the_wheels(
    tmp_path: Path, wheel: Path
) -> None:
    series = make_series(tmp_path, [STEP_1])
    repo = build_standin(wheel, tmp_path / "ray")
    (repo / "python/ray/serve/extra.py").write_text("# only in the checkout\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a real checkout has more than the wheel")
    release = RayRelease("2.60.0", "ray.whl", "0" * 64, commit=git(repo, "rev-parse", "HEAD"))
    result = pr_branches(repo, series, release, wheel, None)
    assert "commit" in result.why and result.rows[0].tests is None


def test_refuses_a_checkout_off_the_pin(tmp_path: Path, wheel: Path) -> None:
    series = make_series(tmp_path, [STEP_1])
    repo = build_standin(wheel, tmp_path / "ray")
    (repo / "python" / ROUTER).write_text("ROUTE = 'moved on'\n")
    git(repo, "commit", "-q", "-am", "upstream moved on")
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(HarnessError) as err:
        pr_branches(repo, series, RELEASE, wheel, None)
    assert head[:12] in str(err.value) and PIN_COMMIT in str(err.value)
    assert branches(repo) == ["main"]
    assert_untouched(repo, head)


def test_refuses_a_dirty_tree(tmp_path: Path, wheel: Path) -> None:
    series = make_series(tmp_path, [STEP_1])
    repo = build_standin(wheel, tmp_path / "ray")
    (repo / "notes.txt").write_text("work in progress\n")
    with pytest.raises(HarnessError, match="notes.txt"):
        pr_branches(repo, series, RELEASE, wheel, None)
    assert branches(repo) == ["main"]


def test_existing_branch_is_refused_unless_forced(tmp_path: Path, wheel: Path) -> None:
    series = make_series(tmp_path, [STEP_1, STEP_2])
    repo = build_standin(wheel, tmp_path / "ray")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "serve/router-skips-draining-replicas")
    with pytest.raises(HarnessError, match="router-skips-draining-replicas.*--force"):
        pr_branches(repo, series, RELEASE, wheel, None)
    # The first name was free, but it is not created either: all or none.
    assert branches(repo) == ["main", "serve/router-skips-draining-replicas"]
    assert_untouched(repo, head)

    result = pr_branches(repo, series, RELEASE, wheel, None, force=True)
    assert git(repo, "rev-parse", "serve/router-skips-draining-replicas") == result.rows[1].commit
    assert len(branches(repo)) == 3


def test_force_does_not_move_a_checked_out_branch(tmp_path: Path, wheel: Path) -> None:
    series = make_series(tmp_path, [STEP_1])
    repo = build_standin(wheel, tmp_path / "ray")
    git(repo, "switch", "-q", "-c", "serve/drain-replicas-two-phases")
    with pytest.raises(HarnessError, match="checked out"):
        pr_branches(repo, series, RELEASE, wheel, None, force=True)
    assert git(repo, "rev-parse", "HEAD") == git(repo, "rev-parse", "main")


def test_a_patch_that_does_not_apply_leaves_no_branch(tmp_path: Path, wheel: Path) -> None:
    good = make_series(tmp_path / "good", [STEP_1, STEP_2])
    # Written against the base, it changes the line the first patch changed.
    (bad,) = make_series(
        tmp_path / "bad",
        [
            (
                '[Serve] Conflict\n\nStacked on "Drain replicas in two phases".\n',
                {REPLICA: lines(l5="LINE_5 = 'other'")},
            )
        ],
    )
    third = tmp_path / "0003-Serve-Conflict.patch"
    third.write_bytes(bad.read_bytes())
    repo = build_standin(wheel, tmp_path / "ray")
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(HarnessError) as err:
        pr_branches(repo, [*good, third], RELEASE, wheel, None)
    assert third.name in str(err.value) and "No branch was created" in str(err.value)
    assert branches(repo) == ["main"]
    assert_untouched(repo, head)


# ------------------------------------------------------------ stacks


def test_a_stack_paragraph_is_read_across_lines_and_inner_quotes() -> None:
    message = (
        'Why.\n\nStacked on "HAProxy: count a server in "UP n/m" as up" and\n'
        '"Drain replicas in\ntwo phases".\n\nMore.'
    )
    assert stack_paragraph(message) == (
        '"HAProxy: count a server in "UP n/m" as up" and "Drain replicas in two phases".'
    )
    assert stack_paragraph("Why.\n\nNot stacked on anything.\n") is None


def test_a_stack_includes_what_its_patches_are_stacked_on(tmp_path: Path) -> None:
    third = (
        '[Serve] Retune line 12\n\nStacked on "Router skips draining replicas".\n',
        STEP_3[1],
    )
    series = make_series(tmp_path, [STEP_1, STEP_2, third, STEP_4])
    names = [[p.name[:4] for p in stack] for stack in series_stacks(series)]
    assert names == [[], ["0001"], ["0001", "0002"], []]


def test_a_stack_naming_no_earlier_subject_is_refused(tmp_path: Path) -> None:
    wrong = ('[Serve] Rename the API\n\nStacked on "Drain replicas in one phase".\n', STEP_4[1])
    series = make_series(tmp_path, [STEP_1, wrong])
    with pytest.raises(HarnessError, match="Drain replicas in two phases"):
        series_stacks(series)
    # Named later in the series than itself is not a stack either.
    later = ('[Serve] Rename the API\n\nStacked on "Drain replicas in two phases".\n', STEP_4[1])
    with pytest.raises(HarnessError, match="Earlier subjects: none"):
        series_stacks(make_series(tmp_path / "later", [later, STEP_1]))


def test_check_stacks_applies_each_patch_on_its_stack_and_runs_its_tests(
    tmp_path: Path, wheel: Path, env: TestEnv
) -> None:
    # Changes line 6, next to the first patch's line 5, and does not say it is
    # stacked on it: it cannot apply to the pin.
    unsaid = ("[Serve] Tune line 6\n", {REPLICA: lines(l5="LINE_5 = 'drained'", l6="LINE_6 = 6.0")})
    series = make_series(tmp_path, [STEP_1, STEP_2, STEP_4, unsaid])
    result = check_stacks(wheel, series, env)
    rows = {r.patch: r for r in result.rows}
    assert (rows["0001"].alone, rows["0001"].applies, str(rows["0001"].tests)) == (
        True,
        True,
        "1 passed",
    )
    # The second applies alone too, but its test needs the first: it runs on
    # its stack, where it passes.
    assert rows["0002"].stacked_on == ["0001"] and rows["0002"].applies
    assert str(rows["0002"].tests) == "1 passed"
    assert rows["0003"].ok and rows["0003"].tests is None
    assert not rows["0004"].applies and "0004-Serve-Tune-line-6.patch" in rows["0004"].where
    assert not result.ok
    assert "1 of 4" not in result.format() and "3 of 4 apply alone" in result.format()


def test_check_stacks_reports_a_test_that_fails_on_its_stack(
    tmp_path: Path, wheel: Path, env: TestEnv
) -> None:
    # The second patch's test needs the first, which its message leaves out.
    needs_first = (
        "from ray.serve._private import replica, router\n\n\n"
        "def test_router():\n    assert router.ROUTE == 'skip-draining'\n"
        "    assert replica.LINE_5 == 'drained'\n"
    )
    unstacked = ("[Serve] Router skips draining replicas\n", {**STEP_2[1], TEST_TWO: needs_first})
    series = make_series(tmp_path, [STEP_1, unstacked])
    result = check_stacks(wheel, series, env)
    second = result.rows[1]
    assert second.applies and not second.tests_ok and not result.ok
    assert "FAILED" in result.format()


# ------------------------------------------------------------ test environment


def fake_pip(folder: Path, exit_code: int = 0) -> Path:
    """An interpreter whose `-m pip download ... -d DIR REQ` records the call in
    folder/calls and leaves one wheel in DIR, so no download really happens."""
    script = folder / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{folder / "calls"}"\n'
        'while [ "$1" != "-d" ]; do shift; done\n'
        'touch "$2/pytest-8.0.0-py3-none-any.whl"\n'
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return script


def test_the_pytest_wheels_are_downloaded_once(monkeypatch, tmp_path: Path) -> None:
    import harness.core.wheels as wheels

    monkeypatch.setattr(wheels, "WHEELHOUSE_DIR", tmp_path / "wheelhouse")
    python = str(fake_pip(tmp_path))
    house = wheels.ensure_requirement_wheelhouse("pytest==8.0.0", python)
    assert house == tmp_path / "wheelhouse" / "pytest-8.0.0"
    assert sorted(p.name for p in house.iterdir()) == [
        ".complete",
        "pytest-8.0.0-py3-none-any.whl",
    ]
    assert wheels.ensure_requirement_wheelhouse("pytest==8.0.0", python) == house
    assert (tmp_path / "calls").read_text().count("download") == 1
    assert [p.name for p in (tmp_path / "wheelhouse").iterdir()] == ["pytest-8.0.0"]


def test_a_failed_pytest_download_is_not_taken_for_a_wheelhouse(
    monkeypatch, tmp_path: Path
) -> None:
    import harness.core.wheels as wheels

    monkeypatch.setattr(wheels, "WHEELHOUSE_DIR", tmp_path / "wheelhouse")
    with pytest.raises(HarnessError, match="pip could not download pytest==8.0.0"):
        wheels.ensure_requirement_wheelhouse("pytest==8.0.0", str(fake_pip(tmp_path, 1)))
    assert [p.name for p in (tmp_path / "wheelhouse").iterdir()] == ["pytest-8.0.0.partial"]


# ------------------------------------------------------------ running tests


def test_run_tests_counts_each_file(tmp_path: Path, env: TestEnv) -> None:
    serve = tmp_path / "tree" / "ray" / "serve"
    write_files(
        serve.parent.parent,
        {
            **SERVE_FILES,
            "ray/serve/tests/unit/test_a.py": "def test_ok():\n    pass\n\n\n"
            "def test_bad():\n    assert 1 == 2\n",
            "ray/serve/tests/unit/test_b.py": "import no_such_module\n",
        },
    )
    (tmp_path / "scratch").mkdir()
    run = run_tests(
        env,
        serve,
        ["ray/serve/tests/unit/test_a.py", "ray/serve/tests/unit/test_b.py"],
        tmp_path / "scratch",
    )
    assert not run.ok
    assert str(run.counts(["ray/serve/tests/unit/test_a.py"])) == "1 passed, 1 failed"
    assert str(run.counts(["ray/serve/tests/unit/test_b.py"])) == "1 error"
    assert "no_such_module" in run.output
    assert list((tmp_path / "scratch").iterdir()) == []


# ------------------------------------------------------------ rebase-check


def test_rebase_check_names_how_each_patch_applies(tmp_path: Path, wheel: Path) -> None:
    series = make_series(tmp_path, [STEP_1, STEP_2, STEP_3, STEP_4])
    # The other release moved three lines of replica.py: line 2 is outer
    # context of patch 1's hunk, line 22 sits between patch 2's two changes,
    # and line 12 is the very line patch 3 changes.
    other = fake_wheel(
        tmp_path / "ray-2.59.0.whl",
        {REPLICA: lines(l2="LINE_2 = 'two'", l22="LINE_22 = 'moved'", l12="LINE_12 = 'theirs'")},
    )
    result = rebase_check(other, "2.59.0", wheel, series, None)
    rows = {r.patch[:4]: r for r in result.rows}
    assert rows["0001"].applies == "with fuzz"
    assert "_private/replica.py hunk #1 (line 2)" in rows["0001"].where
    assert rows["0002"].applies == "3-way"
    assert rows["0003"].applies == "fails"
    assert "_private/replica.py hunk #1" in rows["0003"].where
    assert "conflicts in _private/replica.py" in rows["0003"].where
    assert (rows["0004"].applies, rows["0004"].tests_text) == (
        "not tried",
        "not run: stacked on 0003, which does not apply",
    )
    assert not result.ok


def test_rebase_check_on_the_pinned_tree_is_clean_and_tested(
    tmp_path: Path, wheel: Path, env: TestEnv
) -> None:
    series = make_series(tmp_path, [STEP_1, STEP_2, STEP_4])
    result = rebase_check(wheel, "2.60.0", wheel, series, env)
    assert [r.applies for r in result.rows] == ["clean"] * 3
    assert [r.tests_text for r in result.rows] == [
        "own 1 passed",
        "own 1 passed; earlier 1 passed",
        "own none ran; earlier 2 passed",
    ]
    assert result.ok
    assert "0001" in result.format()


# ------------------------------------------------------------ pr-body


def write_result(results: Path, name: str, labels: list[str], failures: list[int]) -> float:
    runs = {}
    t0 = time.time() - 3600
    for label, failed in zip(labels, failures, strict=True):
        history = History({"label": label, "image": f"rayspot-node:{label}-0000", "scenario": name})
        for i in range(10):
            error = "reset" if i < failed else None
            history.add_request(
                Request("short", t0 + i, t0 + i + 0.01, None if error else 200, error)
            )
        runs[label] = (history, check(history))
    write_report(
        results / name,
        f"Title of {name}",
        runs,
        {"Checks and measurements": "- ✔ the replica was replaced"},
        {"as_expected": True, "findings": [f"{name}: as claimed"]},
    )
    # pr-body reads report.json, never the markdown.
    (results / name / "report.md").unlink()
    return t0


def evidence_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evidence.toml"
    path.write_text(text)
    return path


def test_pr_body_shows_message_results_and_what_they_do_not_show(tmp_path: Path) -> None:
    series = make_series(tmp_path, [STEP_1, STEP_2])
    results = tmp_path / "results"
    t0 = write_result(results, "health_failure", ["2.60.0-stock", "2.60.0-patched"], [3, 0])
    evidence = load_evidence(
        evidence_file(
            tmp_path,
            'common_caveats = ["One 2-core machine."]\n'
            f'[patch."{series[0].name}"]\n'
            'scenarios = ["health_failure", "controller_lag", "bench-health"]\n'
            'related = ["hung_replica"]\n'
            # Wrapped with a line-ending backslash, as evidence.toml wraps its prose.
            'caveats = ["""\\\n    The gate never \\\n    fired."""]\n',
        )
    )
    body = pr_body(
        "1",
        series,
        results,
        known_scenarios={"health_failure", "controller_lag", "hung_replica"},
        evidence=evidence,
    )
    assert body.startswith("# [Serve] Drain replicas in two phases\n\nStop routing first.")
    assert "### `health_failure`: Title of health_failure" in body
    assert "| failed | 3 (reset 3) | 0 |" in body
    assert prbody._utc(t0) in body
    assert "**Outcome**: as the scenario claims" in body
    assert "- health_failure: as claimed" in body
    assert "- ✔ the replica was replaced" in body
    # Scenarios without a result are named, not left out.
    for missing in ("controller_lag", "hung_replica"):
        assert f"No result yet: `{results / missing / 'report.json'}`" in body
    assert "### `bench-health`" in body and "bench-health.log` does not exist" in body
    assert "Related runs below are on stock only" in body
    after = body.split("## What these runs do not show", 1)[1]
    assert after == "\n\n- One 2-core machine.\n- The gate never fired.\n"


def test_a_configuration_run_on_an_older_image_says_so(tmp_path: Path) -> None:
    results = tmp_path / "results"
    label = "2.60.0-patched flags on"
    history = History(
        {
            "label": label,
            "config": {"image": "2.60.0-patched", "name": "flags on", "env": {}},
            "image": "rayspot-node:2.60.0-patched-old",
            "scenario": "membership_churn",
        }
    )
    history.add_request(Request("short", 1.0, 1.01, 200, None))
    write_report(results / "membership_churn", "Churn", {label: (history, check(history))}, {}, {})
    tags = {"2.60.0-patched": [(2, "rayspot-node:2.60.0-patched-new"), (1, "x")]}
    section = "\n".join(
        prbody._scenario_section("membership_churn", results, {"membership_churn"}, tags)
    )
    assert f"{label} ran on `rayspot-node:2.60.0-patched-old`, which the current inputs" in section


def test_pr_body_of_a_series_patch_names_its_runs_and_caveats(tmp_path: Path) -> None:
    series = read_series()
    evidence = load_evidence()
    # The force-kill budget's patch: its evidence names scenarios only, no bench.
    patch = next(p for p in series if "force-kill-budget" in p.name)
    mine = evidence.by_patch[patch.name]
    body = pr_body(patch.name[:4], series, tmp_path / "results")
    assert body.startswith(f"# {patch_message(patch)[0]}\n\n")
    for name in (*mine.scenarios, *mine.related):
        assert f"### `{name}`" in body
        assert f"No result yet: `{tmp_path / 'results' / name / 'report.json'}`" in body
    after = body.split("## What these runs do not show\n\n", 1)[1]
    assert after == "".join(f"- {c}\n" for c in (*evidence.common_caveats, *mine.caveats))


def test_pr_body_for_a_patch_without_evidence_says_so(tmp_path: Path) -> None:
    (patch,) = make_series(tmp_path, [STEP_4])
    # Numbered like a patch that has evidence, but another file: nothing of
    # that patch's may show up in this one's description.
    other = tmp_path / "0003-Serve-Rename-the-API.patch"
    other.write_bytes(patch.read_bytes())
    body = pr_body("0003", [other], tmp_path / "results", known_scenarios=set())
    assert body.startswith("# [Serve] Rename the API\n")
    assert (
        f"No evidence recorded for `{other.name}`: `harness/upstream/evidence.toml` has no "
        "entry under that file name" in body
    )
    assert "###" not in body and "What these runs do not show" not in body
    with pytest.raises(HarnessError, match="no patch 0008.*0003"):
        pr_body("8", [other], tmp_path / "results", known_scenarios=set())


def test_every_patch_in_the_series_has_evidence_and_no_other_file() -> None:
    recorded = set(load_evidence().by_patch)
    series = {p.name for p in read_series()}
    assert sorted(series - recorded) == [], "patches without an entry in evidence.toml"
    assert sorted(recorded - series) == [], "evidence.toml entries for no patch in the series"


def test_every_mapped_scenario_exists() -> None:
    from harness.scenarios import SCENARIOS

    evidence = load_evidence()
    named = {n for e in evidence.by_patch.values() for n in (*e.scenarios, *e.related)}
    assert named - set(SCENARIOS) == {prbody.BENCH_HEALTH}
    assert all(e.caveats for e in evidence.by_patch.values())
    assert evidence.common_caveats


def test_a_misspelt_evidence_key_is_refused(tmp_path: Path) -> None:
    path = evidence_file(tmp_path, '[patch."0001-x.patch"]\ncaveat = ["one"]\n')
    with pytest.raises(HarnessError, match=r'\[patch."0001-x.patch"\] has caveat; it may hold'):
        load_evidence(path)
    path = evidence_file(tmp_path, '[patch."0001-x.patch"]\nscenarios = "health_failure"\n')
    with pytest.raises(HarnessError, match="scenarios must be a list of strings"):
        load_evidence(path)


def test_the_stacks_table_keeps_its_columns_apart_for_a_long_stack() -> None:
    from harness.upstream.stacks import StackRow, StacksResult

    long_stack = ["0001", "0002", "0006", "0008", "0009", "0010", "0011"]
    rows = [StackRow("0012", long_stack, True, True), StackRow("0001", [], True, True)]
    lines = StacksResult(rows, 1.0).format().splitlines()
    header = next(line for line in lines if line.startswith("patch"))
    row = next(line for line in lines if line.startswith("0012"))
    # Each row's "alone" cell sits under the header's.
    assert row[header.index("alone") :].startswith("yes")
    assert ", ".join(long_stack) + "  " in row


def test_a_patchs_own_tests_are_its_test_files_under_serve_tests(tmp_path):
    # Unit tests and the tests that start a local cluster; not a conftest, not
    # a test of another package.
    def diff(path: str) -> str:
        return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"

    patch = tmp_path / "0001-Serve-Change.patch"
    patch.write_text(
        "Subject: [Serve] Change\n\n"
        + diff("python/ray/serve/_private/replica.py")
        + diff("python/ray/serve/tests/unit/test_replica.py")
        + diff("python/ray/serve/tests/test_cluster_change.py")
        + diff("python/ray/serve/tests/conftest.py")
        + diff("python/ray/tests/test_core.py")
    )

    assert patch_tests(patch) == [
        "ray/serve/tests/unit/test_replica.py",
        "ray/serve/tests/test_cluster_change.py",
    ]
