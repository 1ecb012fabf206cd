"""harness.cluster.engine's refusals before any Docker call: a Python without docker-py
is named as such (not reported as a missing daemon), and an unreachable daemon
names the DOCKER_HOST it was looked for at. The docker module is replaced; no
daemon is touched."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from harness.cluster import engine
from harness.core.errors import HarnessError


@pytest.fixture(autouse=True)
def _fresh_client():
    # client() is cached per process; each test must build its own.
    engine.client.cache_clear()
    yield
    engine.client.cache_clear()


def _namespace_docker() -> types.ModuleType:
    """What `import docker` gives from the repo root without docker-py: the
    project's docker/ folder as a namespace package, with no from_env."""
    module = types.ModuleType("docker")
    module.__path__ = []  # a package, as a namespace package is
    return module


@pytest.mark.parametrize(
    "found", [None, _namespace_docker()], ids=["not installed", "the repo's docker/ folder"]
)
def test_a_python_without_docker_py_is_told_to_use_the_venv(monkeypatch, found) -> None:
    # None in sys.modules makes `import docker` raise ImportError.
    monkeypatch.setitem(sys.modules, "docker", found)
    with pytest.raises(HarnessError) as err:
        engine.client()
    message = str(err.value)
    assert f"{sys.executable} has no docker-py" in message
    assert ".venv/bin/python" in message
    assert "unreachable" not in message


def _docker_without_daemon() -> types.ModuleType:
    module = types.ModuleType("docker")

    class Engine:
        def ping(self) -> None:
            raise ConnectionError("Connection refused")

    module.from_env = lambda timeout: Engine()
    return module


def test_an_unreachable_daemon_names_docker_host(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", _docker_without_daemon())
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.1.2.3:2375")
    with pytest.raises(HarnessError) as err:
        engine.client()
    message = str(err.value)
    assert message.startswith("the Docker daemon is unreachable at DOCKER_HOST=tcp://10.1.2.3:2375")
    assert "unset DOCKER_HOST" in message and "Connection refused" in message


def test_an_unreachable_local_daemon_says_docker_host_is_not_set(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", _docker_without_daemon())
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    with pytest.raises(
        HarnessError,
        match="unreachable at the local socket "
        r"\(DOCKER_HOST is not set\)",
    ):
        engine.client()


def test_a_verb_that_needs_docker_exits_2_with_the_venv_named(monkeypatch, capsys) -> None:
    import signal

    import harness.cli as cli

    monkeypatch.setitem(sys.modules, "docker", _namespace_docker())
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(["status"]) == 2
    finally:
        signal.signal(signal.SIGTERM, before)
    assert ".venv/bin/python -m harness" in capsys.readouterr().err


# ------------------------------------------------------------------ the calls the engine makes
# docker-py's errors and IPAM types need no daemon; the client is a fake that
# records what the engine asks of it.


class FakeContainer:
    def __init__(self, statuses: list[str], kill_error: Exception | None = None) -> None:
        self.statuses = list(statuses)  # what each reload() finds, in turn
        self.status = self.statuses[0]
        self.kill_error = kill_error
        self.killed = False

    def reload(self) -> None:
        self.status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def kill(self) -> None:
        self.killed = True
        if self.kill_error:
            raise self.kill_error


def test_kill_of_a_node_that_already_exited_sends_nothing():
    container = FakeContainer(["exited"])
    assert engine.kill(container) is True
    assert not container.killed


def test_kill_of_a_running_node_kills_it():
    container = FakeContainer(["running"])
    assert engine.kill(container) is False
    assert container.killed


def test_kill_that_loses_the_race_with_the_exit_says_it_had_exited():
    import docker

    container = FakeContainer(["running", "exited"], docker.errors.APIError("is not running"))
    assert engine.kill(container) is True


def test_exit_state_reads_the_engine_nanosecond_time():
    container = SimpleNamespace(reload=lambda: None, attrs={})
    container.attrs["State"] = {
        "ExitCode": 0,
        "OOMKilled": False,
        "FinishedAt": "2026-05-09T07:35:25.123456789Z",
    }
    state = engine.exit_state(container)
    assert state.exit_code == 0 and not state.oom_killed
    assert state.finished_at == pytest.approx(1778312125.123456)
    container.attrs["State"] = {"ExitCode": 0, "FinishedAt": "2026-05-09T07:35:25Z"}
    assert engine.exit_state(container).finished_at == 1778312125.0
    container.attrs["State"] = {"ExitCode": 0, "FinishedAt": "0001-01-01T00:00:00Z"}
    assert engine.exit_state(container).finished_at is None


class FakeClient:
    """Records containers.run / networks.create; networks.create fails with
    each error in `network_errors` first."""

    def __init__(self, network_errors: list[Exception] | None = None) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.network_errors = list(network_errors or [])
        self.containers = SimpleNamespace(run=self._record("containers.run"))
        self.networks = SimpleNamespace(create=self._create_network)

    def _record(self, what: str):
        def call(*args, **kwargs):
            self.calls.append((what, args, kwargs))
            return SimpleNamespace(name=kwargs.get("name"))

        return call

    def _create_network(self, *args, **kwargs):
        self.calls.append(("networks.create", args, kwargs))
        if self.network_errors:
            raise self.network_errors.pop(0)
        return SimpleNamespace(name=args[0])


def test_run_container_asks_docker_py_for_a_detached_container_with_read_only_mounts(
    monkeypatch,
):
    fake = FakeClient()
    monkeypatch.setattr(engine, "client", lambda: fake)
    engine.run_container(
        "img:1",
        ["ray", "start"],
        name="c-head",
        hostname="head",
        network="c-net",
        environment={"A": "1"},
        shm_size="512m",
        labels={"l": "1"},
        read_only_mounts={"/src/harness": "/opt/harness/harness"},
    )
    assert fake.calls == [
        (
            "containers.run",
            ("img:1", ["ray", "start"]),
            {
                "name": "c-head",
                "hostname": "head",
                "detach": True,
                "network": "c-net",
                "environment": {"A": "1"},
                "shm_size": "512m",
                "labels": {"l": "1"},
                "volumes": {"/src/harness": {"bind": "/opt/harness/harness", "mode": "ro"}},
            },
        )
    ]


def test_create_network_moves_past_overlapping_subnets_only(monkeypatch):
    import docker

    overlap = docker.errors.APIError("Pool overlaps with other one on this address space")
    fake = FakeClient([overlap])
    monkeypatch.setattr(engine, "client", lambda: fake)
    network = engine.create_network("c-net", {"l": "1"}, ["10.200.7.0/24", "10.201.7.0/24"])
    assert network.name == "c-net"
    subnets = [kw["ipam"]["Config"][0]["Subnet"] for _, _, kw in fake.calls]
    assert subnets == ["10.200.7.0/24", "10.201.7.0/24"]
    assert all(kw["driver"] == "bridge" and kw["labels"] == {"l": "1"} for _, _, kw in fake.calls)

    monkeypatch.setattr(engine, "client", lambda: FakeClient([overlap, overlap]))
    assert engine.create_network("c-net", {}, ["10.200.7.0/24", "10.201.7.0/24"]) is None

    monkeypatch.setattr(engine, "client", lambda: FakeClient([docker.errors.APIError("denied")]))
    with pytest.raises(docker.errors.APIError, match="denied"):
        engine.create_network("c-net", {}, ["10.200.7.0/24"])


class _ExecRefused:
    name = "rayspot-x-head"

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code

    def exec_run(self, cmd, demux=False):
        import docker

        response = SimpleNamespace(status_code=self.status_code, reason="", url="")
        raise docker.errors.APIError("refused", response=response, explanation="is not running")


def test_exec_in_a_stopped_container_says_it_is_not_running_even_unchecked():
    with pytest.raises(engine.NotRunning, match="cannot run in rayspot-x-head: is not running"):
        engine.exec_in(_ExecRefused(409), ["true"], check=False)


def test_exec_in_passes_other_engine_errors_on():
    import docker

    with pytest.raises(docker.errors.APIError) as err:
        engine.exec_in(_ExecRefused(500), ["true"])
    assert not isinstance(err.value, engine.NotRunning)
