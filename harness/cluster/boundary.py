"""The cluster boundary: what scenarios, the nemesis and the soak may ask of a
Ray cluster, whoever started it.

Two clusters stand behind it:

    cluster.Cluster          Docker containers on this host, started and torn
                             down by the harness (the default; `make test`)
    existing.ExistingCluster a cluster the user runs (VMs, KubeRay), reached
                             through its Ray dashboard and the node commands of
                             its cluster file (clusterfile.py)

A node is a `Node` either way. What only a Docker cluster can do to a node
(pause it, shape its link, exec in it) stays on `Cluster`; a scenario that
needs it runs on Docker only. The questions answered from the GCS's node and
actor tables are written once here, over `ray_nodes()` and `actors()`.
"""

from __future__ import annotations

import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.core.errors import HarnessError

# The operations a cluster file may give as commands, and what each does to a
# node; scenarios name the ones they need (`ClusterFile.require`).
OPERATIONS = {
    "terminate": "terminate the node (a spot preemption's end)",
    "add": "add a worker node (a preempted node's replacement)",
    "partition": "cut the node off the network",
    "heal": "put a partitioned node back, under its old address",
    "stop": "stop every process of the node",
    "resume": "resume a stopped node",
}


class Unavailable(HarnessError):
    """What a cluster cannot tell the harness (the counters of a load balancer
    it does not run, the logs of a node that is gone): the observation is left
    out of the record, and the report says it was not recorded."""


@dataclass
class Node:
    role: str  # "head" | "worker" | "lb"
    name: str
    ip: str
    # The backend's handle on the node (a container, a Ray node id). Only the
    # backend passes it on: everyone else asks the cluster to act on a node.
    handle: object = field(default=None, repr=False, compare=False)


class RayCluster(ABC):
    """A Ray cluster serving Serve apps behind HAProxy, with an ingress in
    front of the nodes. A context manager: leaving the block ends what the
    harness started (a Docker cluster is removed; an existing one is left
    running)."""

    workers: list[Node]
    # How long before a command in the cluster is due it must be started: a
    # `docker exec` of a Python with Ray takes about a second, a Ray job several.
    command_lead_s: float = 2.0

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc) -> None:
        return None

    # ------------------------------------------------------------------ what it is

    @property
    @abstractmethod
    def head(self) -> Node: ...

    @property
    def nodes(self) -> list[Node]:
        return [self.head, *self.workers]

    @property
    @abstractmethod
    def ingress(self) -> tuple[str, int]:
        """(host, port) where users' requests go in: the load balancer in
        front of the nodes' HAProxy."""

    @property
    @abstractmethod
    def serve_port(self) -> int:
        """The port each node's HAProxy serves on (and answers /-/healthz)."""

    # ------------------------------------------------------------------ Ray's tables

    @abstractmethod
    def ray_nodes(self) -> list[dict[str, Any]]:
        """Every node the GCS knows, alive or dead: NodeID (hex), Alive,
        NodeManagerAddress, Resources, and for a dead one its DeathReason (the
        NodeDeathInfo reason's name) where known; each backend adds what else
        its source gives (a hostname, a node name, start and end times)."""

    @abstractmethod
    def actors(self) -> list[dict[str, Any]]:
        """Every actor the GCS knows: id, class, name, state, node_id, pid,
        start and end (seconds since the epoch, or None)."""

    def alive_ray_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.ray_nodes() if n["Alive"]]

    def ray_node_ids(self) -> dict[str, str]:
        """Node name -> Ray node id (hex) of every alive node, matched by IP,
        from one question to the GCS."""
        by_ip = {info["NodeManagerAddress"]: info["NodeID"] for info in self.alive_ray_nodes()}
        return {node.name: by_ip[node.ip] for node in self.nodes if node.ip in by_ip}

    def ray_node_id(self, node: Node) -> str:
        try:
            return self.ray_node_ids()[node.name]
        except KeyError:
            raise HarnessError(f"no alive Ray node has {node.name}'s address {node.ip}") from None

    def ray_node(self, node_id: str) -> dict[str, Any]:
        for info in self.ray_nodes():
            if info["NodeID"] == node_id:
                return info
        raise HarnessError(f"the GCS does not know node {node_id}")

    def node_of(self, ray_node_id: str) -> Node:
        """The node a Ray node id names (by its address)."""
        for ray_node in self.alive_ray_nodes():
            if ray_node["NodeID"] == ray_node_id:
                for node in self.nodes:
                    if node.ip == ray_node["NodeManagerAddress"]:
                        return node
        raise HarnessError(f"no node of this cluster is Ray node {ray_node_id}")

    def replicas_by_node(self, app: str, deployment: str) -> dict[str, list[dict[str, Any]]]:
        """Alive replica actors of a deployment, by Ray node id."""
        by_node: dict[str, list[dict[str, Any]]] = {}
        for actor in self.actors():
            if actor["class"] == f"ServeReplica:{app}:{deployment}" and actor["state"] == "ALIVE":
                by_node.setdefault(actor["node_id"], []).append(actor)
        return by_node

    def replica_names(self, app: str, deployment: str) -> set[str]:
        """Actor names of a deployment's alive replicas (they embed the replica id)."""
        return {
            a["name"] for actors in self.replicas_by_node(app, deployment).values() for a in actors
        }

    def controller_pid(self) -> int:
        for actor in self.actors():
            if actor["name"] == "SERVE_CONTROLLER_ACTOR" and actor["state"] == "ALIVE":
                return actor["pid"]
        raise HarnessError("no alive Serve controller; is an app deployed?")

    # ------------------------------------------------------------------ Serve and the GCS

    def app_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """A deploy config as this cluster needs it: what `deploy` sends, and
        what to hand the agent for a deploy it makes itself (the churn's), so
        both deploy the same thing."""
        return config

    @abstractmethod
    def deploy(
        self, config: dict[str, Any], timeout_s: float = 180, wait: bool = True
    ) -> dict[str, Any]:
        """Deploy declaratively (every app the cluster serves is replaced by
        `config`'s); with `wait`, until every app is RUNNING."""

    @abstractmethod
    def exec_head(self, args: list[str], check: bool = True, timeout_s: float = 120) -> Any:
        """Run the in-cluster agent (`python -m harness.cluster.agent ARGS`)
        on the head; its JSON answer. `timeout_s` bounds a command that runs
        for a while by design (the churn), where the backend must bound it."""

    @property
    @abstractmethod
    def gcs_address(self) -> str:
        """The GCS's address as the agent on the head reaches it ("auto": the
        address Ray gives the job the agent runs in)."""

    def drain_node(self, node_id: str, deadline_s: float, at: float) -> dict[str, Any]:
        """Ask the GCS to drain the node with reason PREEMPTION and a deadline
        `deadline_s` after the call, sent at wall-clock time `at` (start this
        `command_lead_s` early): what a spot-notice agent does. The agent's
        answer: accepted, rejection, sent, deadline."""
        return self.exec_head(
            [
                "drain",
                self.gcs_address,
                node_id,
                "--reason",
                "PREEMPTION",
                "--deadline-s",
                str(deadline_s),
                "--at",
                f"{at:.3f}",
            ]
        )

    # ------------------------------------------------------------------ nodes

    @abstractmethod
    def kill(self, node: Node) -> bool:
        """Terminate the whole node. True if it had already exited by itself
        (a drained, idle raylet shuts down on its own)."""

    @abstractmethod
    def node_status(self, node: Node) -> str:
        """ "running", or what else the node is now ("exited", "paused", ...)."""

    @abstractmethod
    def exit_time(self, node: Node) -> float | None:
        """When the node's Ray stopped by itself, if it did before the harness
        terminated it; None if it was still running when terminated."""

    @abstractmethod
    def add_worker(self) -> Node:
        """One more worker, joined to the cluster and taking traffic once its
        Serve proxy is healthy (a preempted node's replacement)."""

    @abstractmethod
    def wait_lb_ready(self, nodes: list[Node] | None = None, timeout_s: float = 90) -> None:
        """Wait until every given node's Serve answers healthy to the ingress."""

    @abstractmethod
    def lb_server_errors(self) -> dict[str, dict[str, int]]:
        """The ingress LB's error counters per node (Unavailable where the
        harness cannot read them: a load balancer it does not run)."""

    # ------------------------------------------------------------------ observations

    @abstractmethod
    def haproxy_pids(self, node: Node) -> list[int]:
        """The node's HAProxy processes now."""

    @abstractmethod
    def watch_processes(self, node: Node, name: str, every_s: float) -> ProcessWatch:
        """The PIDs of the node's processes called `name`, each time they
        change, looked at every `every_s` by one command in the node."""

    @abstractmethod
    def metrics_text(self, node: Node | None = None) -> str:
        """Everything a node's (default: the head's) metrics agent exports,
        as Prometheus text."""

    def metric_total(self, name: str, node: Node | None = None) -> float:
        """The sum over all label sets of a metric a node exports; e.g. a
        histogram's `_count`."""
        return sample_total(self.metrics_text(node), name)

    @abstractmethod
    def log_lines(
        self, node: Node, needles: list[str], where: str = "/logs/serve/"
    ) -> list[tuple[float, str]]:
        """(time, line) of the node's Ray log lines containing any needle, from
        files whose path contains `where`."""


_LOG_STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
# The Serve controller's log line when it starts stopping a replica.
STOPPING = "Stopping Replica("
_REPLICA_ID = re.compile(r"Replica\(id='([^']+)'")


def logged_replica_id(line: str) -> str | None:
    """The id of the replica a Serve controller log line names
    ("Replica(id='...'"), if it names one."""
    found = _REPLICA_ID.search(line)
    return found.group(1) if found else None


@dataclass
class Sample:
    """One sample of a Prometheus metric: its labels and value."""

    labels: dict[str, str]
    value: float


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str, name: str) -> list[Sample]:
    """The samples of metric `name` in a Prometheus text exposition."""
    pattern = rf"^{re.escape(name)}(?:\{{(.*)\}})? ([0-9.e+-]+|NaN|[+-]Inf)$"
    return [
        Sample(dict(_LABEL.findall(m.group(1) or "")), float(m.group(2)))
        for m in re.finditer(pattern, text, re.M)
    ]


def sample_total(text: str, name: str) -> float:
    """The sum of metric `name` over all its label sets in a Prometheus text
    exposition; 0 where it is not exported."""
    return sum(s.value for s in parse_samples(text, name))


def log_time(line: str) -> float | None:
    """Serve lines start `LEVEL YYYY-MM-DD HH:MM:SS,mmm`, raylet lines
    `[YYYY-MM-DD HH:MM:SS,mmm`; both in the container's clock, the host's, UTC."""
    match = _LOG_STAMP.search(line[:40])
    if not match:
        return None
    stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return stamp.replace(tzinfo=UTC).timestamp()


def watch_script(name: str, every_s: float) -> str:
    """A shell loop that prints `pid PID` (its own), then `at TIME PIDS` with
    the PIDs of the processes called `name` each time they change."""
    return (
        'echo "pid $$"; prev=x; '
        f"while :; do cur=$(pgrep -x {shlex.quote(name)} | tr '\\n' ' '); "
        'if [ "$cur" != "$prev" ]; then echo "at $(date +%s.%N) $cur"; prev=$cur; fi; '
        f"sleep {every_s:g}; done"
    )


class ProcessWatch:
    """What `watch_processes` started: iterate for (time, PIDs) at each change,
    the first being the PIDs at the start; `stop()` ends the command."""

    def __init__(self, lines: Iterator[str], stop: Callable[[], object]) -> None:
        self._lines, self._stop = lines, stop

    def __iter__(self) -> Iterator[tuple[float, set[int]]]:
        for line in self._lines:
            if line.startswith("at "):
                stamp, *pids = line.removeprefix("at ").split()
                yield float(stamp), {int(pid) for pid in pids}

    def stop(self) -> None:
        self._stop()
