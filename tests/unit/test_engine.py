"""harness.cluster.engine's refusals before any Docker call: a Python without docker-py
is named as such (not reported as a missing daemon), and an unreachable daemon
names the DOCKER_HOST it was looked for at. The docker module is replaced; no
daemon is touched."""

from __future__ import annotations

import sys
import types

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
