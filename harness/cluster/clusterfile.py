"""The cluster file: what the harness needs to know about a Ray cluster it did
not start, written by its user (TOML).

    dashboard = "http://10.0.0.5:8265"   # Ray's dashboard on the head
    ingress = "http://10.0.0.100:80"     # the load balancer users' requests go through
    serve_port = 8000                     # each node's Serve HTTP port (HAProxy), default 8000
    metrics_port = 8090                   # each node's --metrics-export-port

    [commands]  # shell commands that act on one node
    terminate = "./ops/terminate-node.sh {ip}"  # your script: a cloud API call
    add = "./ops/add-worker.sh"            # optional
    partition = "..."                     # optional, with heal
    heal = "..."
    stop = "..."                          # optional, with resume
    resume = "..."

Every command is a template over the node's `{id}` (Ray node id, hex), `{ip}`
and `{name}` (its Ray node name: `ray start --node-name`, whose default is the
node's IP), each shell-quoted where it is put. `terminate` is required: without it no scenario
can preempt a node. A scenario names the operations it needs, and one the file
does not give is refused (exit 2) before anything is changed.
"""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from harness.cluster.boundary import OPERATIONS, Node
from harness.core import proc
from harness.core.errors import HarnessError

PLACEHOLDERS = ("id", "ip", "name")
# Operations that act on no node: their commands are templates over nothing.
CLUSTER_WIDE = ("add",)
# Operations that undo one another: a file gives both or neither.
PAIRS = (("partition", "heal"), ("stop", "resume"))
COMMAND_TIMEOUT_S = 300.0  # a cloud API call or a pod deletion, with room


@dataclass(frozen=True)
class ClusterFile:
    path: Path
    dashboard: str
    ingress_host: str
    ingress_port: int
    serve_port: int = 8000
    metrics_port: int = 0
    commands: dict[str, str] = field(default_factory=dict)

    @property
    def operations(self) -> set[str]:
        return set(self.commands)

    def require(self, needed: set[str], who: str) -> None:
        """Refuse, naming every missing command, unless the file gives all of
        `needed`; `who` is the scenario or command that needs them."""
        missing = sorted(needed - self.operations)
        if missing:
            lines = "\n".join(f"  {op} = ...   # {OPERATIONS[op]}" for op in missing)
            raise HarnessError(
                f"{who} needs node operations that {self.path} does not give: "
                f"{', '.join(missing)}. Nothing was changed on the cluster. Add them "
                f"under [commands], as templates over {{id}}, {{ip}} and {{name}}:\n{lines}"
            )

    def command(self, operation: str, node: Node, node_id: str) -> str:
        """The shell command for `operation` on `node`, its values quoted."""
        self.require({operation}, f"the {operation} operation")
        values = {"id": node_id, "ip": node.ip, "name": node.name}
        return self.commands[operation].format(**{k: shlex.quote(v) for k, v in values.items()})

    def run(self, operation: str, node: Node | None = None, node_id: str = "") -> str:
        """Run the operation's command (on `node`, if it acts on one); its
        output. A command that fails or hangs is an error naming it."""
        if node is None:
            self.require({operation}, f"the {operation} operation")
            command = self.commands[operation].format()
        else:
            command = self.command(operation, node, node_id)
        try:
            result = proc.run(["bash", "-c", command], timeout=COMMAND_TIMEOUT_S)
        except proc.TimeoutExpired:
            raise HarnessError(
                f"the {operation} command from {self.path} did not end in "
                f"{COMMAND_TIMEOUT_S:.0f}s: {command}"
            ) from None
        if result.returncode != 0:
            raise HarnessError(
                f"the {operation} command from {self.path} failed (exit "
                f"{result.returncode}): {command}\n{proc.output_tail(result)}"
            )
        return result.stdout


def load(path: Path) -> ClusterFile:
    """Read and check a cluster file; every problem is an error (exit 2) that
    names the file and the key."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise HarnessError(f"no cluster file at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HarnessError(f"cannot read the cluster file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path} is not valid TOML: {exc}") from None
    known = {"dashboard", "ingress", "serve_port", "metrics_port", "commands"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise HarnessError(f"{path}: unknown keys {', '.join(unknown)}; known: {sorted(known)}")
    dashboard = _http_url(path, data, "dashboard")
    ingress = urlsplit(_http_url(path, data, "ingress"))
    if ingress.path not in ("", "/") or ingress.query:
        raise HarnessError(
            f"{path}: ingress = {data['ingress']!r} has a path; give the load balancer's "
            f"http://HOST[:PORT] alone (the scenarios send their own paths)"
        )
    commands = data.get("commands", {})
    if not isinstance(commands, dict) or not all(
        isinstance(v, str) and v.strip() for v in commands.values()
    ):
        raise HarnessError(f"{path}: [commands] must map operation names to non-empty strings")
    strange = sorted(set(commands) - set(OPERATIONS))
    if strange:
        raise HarnessError(
            f"{path}: unknown operations {', '.join(strange)} under [commands]; "
            f"known: {', '.join(OPERATIONS)}"
        )
    if "terminate" not in commands:
        raise HarnessError(
            f"{path}: [commands] has no terminate; every preemption ends with one "
            f'(for example: terminate = "kubectl delete pod --force {{name}}")'
        )
    for first, second in PAIRS:
        if (first in commands) != (second in commands):
            raise HarnessError(f"{path}: [commands] gives {first} or {second} without the other")
    for operation, template in commands.items():
        _check_template(path, operation, template)
    return ClusterFile(
        path=path,
        dashboard=dashboard.rstrip("/"),
        ingress_host=ingress.hostname or "",
        ingress_port=ingress.port or 80,  # _http_url refused a port of 0
        serve_port=_port(path, data, "serve_port") or 8000,
        metrics_port=_required_port(path, data, "metrics_port"),
        commands=commands,
    )


def http_address(value: str, what: str) -> tuple[str, int]:
    """(host, port) of an http://HOST[:PORT] URL; anything else is an error
    naming `what`."""
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if parts.scheme != "http" or not parts.hostname or port == 0:
        raise HarnessError(
            f"{what} = {value!r} is not an http://HOST[:PORT] URL (the load "
            f"generator speaks plain HTTP/1.1; put TLS termination in front of it)"
        )
    return parts.hostname, port or 80


def _http_url(path: Path, data: dict, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise HarnessError(f"{path}: {key} is missing; give it as an http:// URL")
    http_address(value, f"{path}: {key}")
    return value


def _required_port(path: Path, data: dict, key: str) -> int:
    port = _port(path, data, key)
    if port is None:
        raise HarnessError(
            f"{path}: {key} is missing: the harness reads each node's metrics there and "
            f"checks with it that this host reaches the nodes (ray start --metrics-export-port)"
        )
    return port


def _port(path: Path, data: dict, key: str) -> int | None:
    value = data.get(key)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536
    ):
        raise HarnessError(f"{path}: {key} = {value!r} is not a port number")
    return value


def _check_template(path: Path, operation: str, template: str) -> None:
    allowed = () if operation in CLUSTER_WIDE else PLACEHOLDERS
    over = ", ".join(f"{{{name}}}" for name in allowed) or "nothing (it acts on no node)"
    try:
        template.format(**dict.fromkeys(allowed, "x"))
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise HarnessError(
            f"{path}: the {operation} command {template!r} is not a template over "
            f"{over} ({type(exc).__name__}: {exc}); write a literal brace as {{{{ or }}}}"
        ) from None
