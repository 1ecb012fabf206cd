"""The front LB's config and the start-up guards: pure logic, no Docker."""

import socket
from types import SimpleNamespace

import pytest

from harness.cluster.cluster import Node, check_port_free, lb_config
from harness.core.errors import HarnessError


def _node(name: str, ip: str) -> Node:
    return Node("worker", SimpleNamespace(name=name), ip)


def test_lb_checks_every_node_and_retries_nothing():
    cfg = lb_config([_node("c-head", "10.9.0.2"), _node("c-worker-1", "10.9.0.3")])
    assert "server c-head 10.9.0.2:8000 check" in cfg
    assert "server c-worker-1 10.9.0.3:8000 check" in cfg
    assert "option httpchk GET /-/healthz" in cfg
    assert "retries 0" in cfg
    assert "redispatch" not in cfg and "retry-on" not in cfg


def test_port_in_use_is_named():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(HarnessError, match=f"port {port} on 127.0.0.1 is in use"):
            check_port_free(port)
