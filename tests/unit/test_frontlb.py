"""The front LB's config, its admin-socket commands and its port guard: pure
logic, no Docker (the LB's container is a callable that records the argv)."""

import socket
from types import SimpleNamespace

import pytest

from harness.cluster import frontlb
from harness.cluster.frontlb import check_port_free, lb_config
from harness.core.errors import HarnessError


def _node(name: str, ip: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, ip=ip)


def test_lb_checks_every_node_and_retries_nothing():
    cfg = lb_config([_node("c-head", "10.9.0.2"), _node("c-worker-1", "10.9.0.3")], 8000)
    assert "server c-head 10.9.0.2:8000 check" in cfg
    assert "server c-worker-1 10.9.0.3:8000 check" in cfg
    assert "option httpchk GET /-/healthz" in cfg
    assert "retries 0" in cfg
    assert "redispatch" not in cfg and "retry-on" not in cfg


class FakeLB:
    """The LB's container: answers each admin command from a table."""

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        self.answers = answers or {}
        self.commands: list[str] = []

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        assert argv[:2] == ["python3", "-c"] and frontlb.ADMIN_SOCKET in argv[2]
        command = argv[3]
        self.commands.append(command)
        return 0, self.answers.get(command.split()[0], "\n")


def test_a_joining_node_is_registered_down_until_its_checks_pass():
    lb = FakeLB({"add": "New server registered.\n"})
    frontlb.register(lb, _node("c-worker-3", "10.9.0.5"), 8000)
    server = "nodes/c-worker-3"
    assert lb.commands == [
        f"add server {server} 10.9.0.5:8000 check {frontlb.LB_CHECK}",
        f"set server {server} state drain",
        f"enable health {server}",
        f"set server {server} health down",
        f"set server {server} state ready",
    ]


def test_a_refused_registration_names_the_command():
    lb = FakeLB({"add": "New server registered.\n", "enable": "No such server.\n"})
    with pytest.raises(HarnessError, match="refused `enable health nodes/w`: No such server"):
        frontlb.register(lb, _node("w", "10.9.0.5"), 8000)


def test_servers_reads_the_nodes_backend_of_show_stat():
    header = "# pxname,svname," + ",".join("status" if i == 17 else f"f{i}" for i in range(2, 30))

    def row(proxy: str, server: str, status: str) -> str:
        fields = [proxy, server] + [""] * 15 + [status] + [""] * 10
        return ",".join(fields)

    stat = "\n".join(
        [
            header,
            row("front", "FRONTEND", "OPEN"),
            row("nodes", "c-head", "UP"),
            row("nodes", "c-worker-1", "DOWN"),
            row("nodes", "BACKEND", "UP"),
        ]
    )
    assert frontlb.servers(FakeLB({"show": stat})) == {"c-head": "UP", "c-worker-1": "DOWN"}


def test_server_errors_reads_each_node_s_error_counters_by_name():
    header = "# pxname,svname,econ,eresp,status,cli_abrt,srv_abrt,"
    stat = "\n".join(
        [
            header,
            "front,FRONTEND,,,OPEN,0,0,",
            "nodes,c-head,0,1,UP,0,0,",
            "nodes,c-worker-1,2,0,DOWN,0,3,",
            "nodes,BACKEND,2,1,UP,0,3,",
        ]
    )
    assert frontlb.server_errors(FakeLB({"show": stat})) == {
        "c-head": {"econ": 0, "eresp": 1, "cli_abrt": 0, "srv_abrt": 0},
        "c-worker-1": {"econ": 2, "eresp": 0, "cli_abrt": 0, "srv_abrt": 3},
    }
    with pytest.raises(HarnessError, match="no header"):
        frontlb.server_errors(FakeLB({"show": "Unknown command.\n"}))


def test_port_in_use_is_named():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(HarnessError, match=f"port {port} on 127.0.0.1 is in use"):
            check_port_free(port)
