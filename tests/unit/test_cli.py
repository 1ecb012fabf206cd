"""`python -m harness`'s exit codes: one convention for every verb (0 pass, 1 the
verdict failed, 2 bad usage or input, 3 unknown, 130 interrupted), driven
through main() with the verbs' heavy parts replaced. No Docker, no downloads."""

from __future__ import annotations

import argparse
import signal
import types
from pathlib import Path

import pytest
from test_self_contained import pointers

import harness.cli as cli
from harness.core.errors import HarnessError, VerdictFailed, VerdictUnknown

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ladder"


@pytest.fixture(autouse=True)
def _keep_sigterm():
    # main() turns SIGTERM into KeyboardInterrupt; pytest's own handler comes back.
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _replace_verb(monkeypatch: pytest.MonkeyPatch, raised: BaseException) -> None:
    def verb(args) -> None:
        raise raised

    # build_parser() reads the module's functions each time main() runs.
    monkeypatch.setattr(cli, "cmd_status", verb)


@pytest.mark.parametrize(
    "raised, code, label",
    [
        (VerdictFailed("the checks failed"), 1, "failed: the checks failed"),
        (HarnessError("no such file"), 2, "error: no such file"),
        (VerdictUnknown("values missing"), 3, "unknown: values missing"),
        (KeyboardInterrupt(), 130, "interrupted:"),
    ],
)
def test_each_outcome_has_its_code(monkeypatch, capsys, raised, code, label) -> None:
    _replace_verb(monkeypatch, raised)
    assert cli.main(["status"]) == code
    assert capsys.readouterr().err.startswith(label)


def test_a_bug_is_unknown_not_failed_and_keeps_its_traceback(monkeypatch, capsys) -> None:
    _replace_verb(monkeypatch, ZeroDivisionError("division by zero"))
    assert cli.main(["status"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err
    assert "there is no verdict: exit 3" in err


def test_bad_usage_is_argparses_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["ladder", "check"])
    assert exit_.value.code == 2


def _bench_parser(name: str) -> argparse.ArgumentParser:
    bench = next(
        a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["bench"]
    benches = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    return benches.choices[name]


@pytest.mark.parametrize(
    "bench, foreign",
    [("health", "--rounds"), ("membership", "--repeats"), ("load", "--sizes")],
)
def test_each_bench_takes_only_its_own_options(capsys, bench: str, foreign: str) -> None:
    assert foreign not in _bench_parser(bench).format_help()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", bench, foreign, "2"])
    assert exit_.value.code == 2


def test_a_bench_help_shows_its_defaults() -> None:
    def words(bench: str) -> str:
        return " ".join(_bench_parser(bench).format_help().split())

    assert "(default 16,32,48)" in words("health")
    assert "(default 16,64,256)" in words("membership")


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    texts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


def test_top_level_help_documents_the_convention() -> None:
    text = cli.build_parser().format_help()
    assert "exit codes (every verb):" in text
    for code in ("0", "1", "2", "3", "130"):
        assert f"\n  {code} " in text, code
    assert "GNU make exits 2" in text


def test_no_help_points_outside_the_repo() -> None:
    for text in _help_texts(cli.build_parser()):
        assert not pointers(text), text


# ------------------------------------------------------------------ ladder check


@pytest.mark.parametrize(
    "name, code", [("spot-notice-ladder-fixed.yaml", 0), ("spot-notice-ladder.yaml", 1)]
)
def test_ladder_pass_and_fail(capsys, name: str, code: int) -> None:
    assert cli.main(["ladder", "check", str(EXAMPLES / name)]) == code
    assert capsys.readouterr().out.rstrip().endswith(f"(exit {code})")


def test_ladder_unknown_is_3(tmp_path: Path, capsys) -> None:
    text = (EXAMPLES / "spot-notice-ladder-fixed.yaml").read_text()
    path = tmp_path / "service.yaml"
    path.write_text(text.replace("load_balancer:\n  deregistration: 2s\n", ""))
    assert cli.main(["ladder", "check", str(path)]) == 3
    assert "add them to get a verdict" in capsys.readouterr().err


def test_ladder_bad_file_is_2(tmp_path: Path, capsys) -> None:
    path = tmp_path / "service.yaml"
    path.write_text("node_env: [\n")
    assert cli.main(["ladder", "check", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}:")


# ------------------------------------------------------------------ run and soak


def test_run_an_unknown_scenario_is_2(capsys) -> None:
    assert cli.main(["run", "no_such_scenario"]) == 2
    assert "unknown scenario 'no_such_scenario'" in capsys.readouterr().err


def test_run_an_outcome_other_than_claimed_is_1(monkeypatch, tmp_path: Path, capsys) -> None:
    import harness.scenarios as scenarios

    report = tmp_path / "report.md"
    report.write_text("# report\n")
    outcome = types.SimpleNamespace(
        name="fake",
        report={"md": report},
        wall_s=1.0,
        as_expected=False,
        findings=["the baseline did not fail"],
    )
    monkeypatch.setitem(scenarios.SCENARIOS, "fake", type("Fake", (), {}))
    monkeypatch.setattr(
        scenarios, "run_scenario", lambda scenario, specs, parallel, cluster_file: outcome
    )
    assert cli.main(["run", "fake"]) == 1
    assert capsys.readouterr().err.startswith("failed: fake: the outcome is not what")


def test_soak_over_the_threshold_is_1(monkeypatch, capsys) -> None:
    import harness.bench.soak as soak

    runs = [types.SimpleNamespace(label="spot-notice ladder #1", passed=False)]
    monkeypatch.setattr(soak, "soak", lambda *args, **kwargs: {soak.LADDER_CONFIG: runs})
    monkeypatch.setattr(soak, "print_soak", lambda results: None)
    assert cli.main(["soak", "--runs", "1", "--minutes", "1"]) == 1
    assert "spot-notice ladder #1 failed" in capsys.readouterr().err


# ------------------------------------------------------------------ upstream


@pytest.fixture
def no_downloads(monkeypatch, tmp_path: Path) -> list[str]:
    """Wheelhouses and test venvs as stubs; the list records the releases asked for."""
    import harness.core.wheels as wheels
    import harness.upstream.testenv as testenv

    asked: list[str] = []

    def house(release):
        asked.append(release.version)
        return tmp_path

    monkeypatch.setattr(wheels, "ensure_wheelhouse", house)
    monkeypatch.setattr(wheels, "verify_ray_wheel", lambda house, release: tmp_path / "ray.whl")
    monkeypatch.setattr(testenv, "ensure_test_env", lambda release, house: None)
    return asked


def test_rebase_check_an_unknown_release_is_2_before_any_download(no_downloads, capsys) -> None:
    assert cli.main(["upstream", "rebase-check", "9.9.9"]) == 2
    assert "Ray 9.9.9 is not in PIN" in capsys.readouterr().err
    assert no_downloads == []


def test_rebase_check_a_patch_that_does_not_apply_is_1(monkeypatch, no_downloads, capsys) -> None:
    import harness.upstream.rebase as rebase
    from harness.core.pin import load_pin

    result = types.SimpleNamespace(ok=False, format=lambda: "0001  fails")
    monkeypatch.setattr(rebase, "rebase_check", lambda *args: result)
    assert cli.main(["upstream", "rebase-check", load_pin().baseline.version]) == 1
    assert capsys.readouterr().err.startswith("failed: rebase-check: a patch does not apply")


def test_branches_whose_tests_fail_are_1(monkeypatch, no_downloads, tmp_path: Path, capsys) -> None:
    import harness.upstream.branches as branches

    row = types.SimpleNamespace(name="serve/drain-replicas-two-phases")
    result = types.SimpleNamespace(failed=[row], format=lambda: "branches")
    monkeypatch.setattr(branches, "pr_branches", lambda *args, **kwargs: result)
    assert cli.main(["upstream", "branches", str(tmp_path)]) == 1
    assert "tests failed on serve/drain-replicas-two-phases" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [["soak"], ["run", "spot_preemption"]])
@pytest.mark.parametrize("count", ["0", "-1", "two"])
def test_parallel_below_one_is_bad_usage(capsys, verb: list[str], count: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*verb, "--parallel", count])
    assert exit_.value.code == 2
    assert "--parallel: must be a whole number of runs, 1 or more" in capsys.readouterr().err


# ------------------------------------------------------------------ setup


@pytest.fixture
def setup_steps(monkeypatch, tmp_path: Path) -> list[str]:
    """`harness setup` with its commands recorded, not run: what each installs."""
    import harness.core.paths as paths
    import harness.core.proc as proc
    import harness.core.wheels as wheels

    steps: list[str] = []

    def run(cmd, capture=True):
        steps.append("venv" if cmd[1:3] == ["-m", "venv"] else cmd[-1])
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(paths, "VENV_DIR", tmp_path / "venv")
    monkeypatch.setattr(proc, "run", run)
    monkeypatch.setattr(wheels, "ensure_wheelhouse", lambda release: steps.append("wheelhouse"))
    return steps


def test_setup_installs_the_requirements_before_ray(setup_steps) -> None:
    # So that docker-py is there while Ray's wheels download (CI builds images then).
    from harness.core.pin import load_pin

    assert cli.main(["setup"]) == 0
    requirements = str(ROOT / "requirements.txt")
    assert setup_steps == ["venv", requirements, "wheelhouse", load_pin().ray.requirement]


def test_setup_without_ray_downloads_no_wheel(setup_steps) -> None:
    assert cli.main(["setup", "--without-ray"]) == 0
    assert setup_steps == ["venv", str(ROOT / "requirements.txt")]


@pytest.mark.parametrize("count", ["-1", "two"])
def test_up_with_fewer_than_no_workers_is_bad_usage_before_docker(capsys, count: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["up", "--workers", count])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--workers: must be a whole number of worker nodes, 0 or more, not '{count}'" in err


@pytest.mark.parametrize("workers", [0, 1, 2, 4])
def test_up_deploys_one_echo_replica_per_node(monkeypatch, capsys, workers: int) -> None:
    # With three replicas at one per node, a cluster of fewer than three nodes
    # waited out the deploy's 180 s and failed.
    from harness.cluster import cluster, engine, images

    deployed = []

    class FakeCluster:
        url = "http://127.0.0.1:18000"

        def __init__(self, config) -> None:
            assert config.workers == workers

        def up(self):
            return self

        def deploy(self, config):
            deployed.append(config)

        def wait_lb_ready(self) -> None:
            pass

    monkeypatch.setattr(engine, "labelled_containers", lambda name: [])
    monkeypatch.setattr(images, "ensure_node_image", lambda spec: "img")
    monkeypatch.setattr(cluster, "Cluster", FakeCluster)
    assert cli.main(["up", "--workers", str(workers)]) == 0
    [echo] = deployed[0]["applications"]
    [deployment] = echo["deployments"]
    assert deployment["num_replicas"] == workers + 1
    assert deployment["max_replicas_per_node"] == 1


def test_scenarios_prints_the_list_run_help_ends_with(capsys) -> None:
    from harness.scenarios import scenario_list

    assert cli.main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert out == scenario_list() + "\n"
