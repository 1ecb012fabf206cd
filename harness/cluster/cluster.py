"""A real multi-node Ray cluster in Docker containers, with a front load balancer.

    network  one user-defined bridge per cluster
    head     `ray start --head --block` as PID 1
    workers  `ray start --address=HEAD --block` as PID 1, N of them
    lb       HAProxy from the same image, standing where a cloud load balancer
             would: it health-checks each node's `/-/healthz` and retries
             nothing. It is the only container published, on 127.0.0.1.

Every node gets the same environment (Serve reads its knobs at import, and
workers inherit the raylet's environment), explicit CPU, object-store and shm
sizes (a container otherwise sees the whole host), and the project's `harness`
package mounted read-only so the apps import on every node.

Each Cluster is one run (harness/cluster/runs.py): its containers and network
are named NAME-RUN-ROLE (`rayspot-stale-1a2b3c4d-head`), labelled with the base
NAME, the run and its owner, and the front LB takes a free host port unless
one is given, so runs on one host never collide. Starting a cluster first
reaps what dead runs left; tearing it down removes exactly its own run.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field, replace
from typing import Any

from harness.cluster import engine, frontlb, runs
from harness.cluster.boundary import Node, ProcessWatch, RayCluster, log_time, watch_script
from harness.core import log
from harness.core.errors import HarnessError
from harness.core.paths import ROOT

_log = log.get(__name__)

HEAD_PORT = 6379
DASHBOARD_PORT = 8265
RAY_STARTED = "Ray runtime started."  # what `ray start` prints once its node is up
SERVE_PORT = 8000
METRICS_PORT = 8090  # a node's metrics agent, for a config that reads Ray's metrics
HARNESS_MOUNT = "/opt/harness"
CLK_TCK = 100  # Linux's USER_HZ: /proc/<pid>/stat counts CPU time in these

# The Serve environment every node starts with. Scenarios add to it.
SERVE_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
    # 2.59.0 defaults to 20000, which needs more descriptors than a container
    # may raise to here; 4096 is 2.60.0's default, so both versions agree.
    "RAY_SERVE_HAPROXY_MAXCONN": "4096",
    "RAY_USAGE_STATS_ENABLED": "0",
    "PYTHONPATH": HARNESS_MOUNT,
}


@dataclass
class ClusterConfig:
    image: str
    name: str = "rayspot"
    workers: int = 2
    num_cpus: int = 2
    object_store_bytes: int = 200_000_000
    shm_size: str = "512m"
    # The front LB's port on 127.0.0.1; None: a free one, picked as it starts.
    lb_port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    # Custom resources on workers only (not the head), e.g. {"w": 10}, so that
    # an app can keep its replicas off the head with `resources: {"w": 1}`.
    worker_resources: dict[str, float] = field(default_factory=dict)
    # Where each node's metrics agent serves Prometheus text (None: Ray picks).
    metrics_port: int | None = None
    # Meant to outlive the process that starts it (`python -m harness up`): the
    # reaper leaves it alone; `down --name` or `down --all` removes it.
    detached: bool = False
    # Ray's dashboard on the head's address (DASHBOARD_PORT), for a client on
    # this host that reaches the cluster as an existing one would be reached.
    dashboard: bool = False

    @property
    def node_env(self) -> dict[str, str]:
        return {**SERVE_ENV, **self.env}


class Cluster(RayCluster):
    """Use as a context manager: leaving the block tears everything down,
    whatever happened inside it (exception, Ctrl-C). A node's handle is its
    container."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._network = None
        self._head: Node | None = None
        self.workers: list[Node] = []
        self.lb: Node | None = None
        self.run = runs.new_run_id()
        self.owner = runs.this_owner()

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Cluster:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc) -> None:
        self.down()

    @property
    def head(self) -> Node:
        """The head node, from up() until down()."""
        if self._head is None:
            raise HarnessError(f"cluster {self.config.name} is not up: it has no head node")
        return self._head

    @property
    def nodes(self) -> list[Node]:
        return ([self._head] if self._head else []) + self.workers

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.config.lb_port}"

    @property
    def ingress(self) -> tuple[str, int]:
        return "127.0.0.1", self.lb_port

    @property
    def serve_port(self) -> int:
        return SERVE_PORT

    @property
    def gcs_address(self) -> str:
        return f"{self.head.ip}:{HEAD_PORT}"

    @property
    def lb_port(self) -> int:
        """The front LB's port on 127.0.0.1, known once it started (it may be picked then)."""
        if self.config.lb_port is None:
            raise HarnessError(f"cluster {self.config.name} has no front LB port yet")
        return self.config.lb_port

    def up(self) -> Cluster:
        cfg = self.config
        started = time.monotonic()
        # First what dead runs left: their containers may hold the port asked
        # for, and their networks subnets.
        containers, networks = runs.reap()
        if containers or networks:
            log.progress(
                _log,
                f"cluster: removed {containers} containers and {networks} networks "
                f"left by runs whose process is gone",
                started,
            )
        if cfg.lb_port:
            frontlb.check_port_free(cfg.lb_port)
        self._network = self._create_network()
        self._head = self._start_node(
            "head",
            [
                "ray",
                "start",
                "--head",
                "--block",
                f"--port={HEAD_PORT}",
                *(
                    [
                        "--include-dashboard=true",
                        "--dashboard-host=0.0.0.0",
                        f"--dashboard-port={DASHBOARD_PORT}",
                    ]
                    if cfg.dashboard
                    else ["--include-dashboard=false"]
                ),
                "--disable-usage-stats",
                *self._resource_args(),
            ],
        )
        self._wait(lambda: self._port_open(self.head, HEAD_PORT), "the head's GCS", 60)
        log.progress(_log, f"cluster: head up at {self.head.ip}", started)
        for i in range(1, cfg.workers + 1):
            self.workers.append(self._start_worker(i))
        # Each worker's `ray start` says when its raylet has registered. Reading
        # that costs the nodes nothing, where asking the GCS costs a Python with
        # Ray imported in the head, every second, beside the nodes starting up.
        self._wait(
            lambda: all(RAY_STARTED in self.logs(w, tail=40) for w in self.workers),
            f"`ray start` on {len(self.workers)} workers",
            120,
        )
        self._wait(
            lambda: len(self.alive_ray_nodes()) == len(self.nodes),
            f"{len(self.nodes)} Ray nodes alive",
            120,
        )
        log.progress(_log, f"cluster: {len(self.nodes)} Ray nodes alive", started)
        self.lb = self._start_lb()
        log.progress(_log, f"cluster: front load balancer on {self.url}", started)
        return self

    def add_worker(self) -> Node:
        """Start one more worker (a replacement for a preempted node, say) and
        register it with the front LB, as an autoscaler and a cloud target group
        would. The LB sends it traffic once its Serve proxy answers /-/healthz,
        which is when Serve has placed a replica on it."""
        started = time.monotonic()
        node = self._start_worker(len(self.workers) + 1)
        self.workers.append(node)
        self._wait(
            lambda: node.ip in {n["NodeManagerAddress"] for n in self.alive_ray_nodes()},
            f"{node.name} to join the cluster",
            120,
        )
        frontlb.register(self._run_in_lb, node, SERVE_PORT)
        log.progress(_log, f"cluster: {node.name} joined and registered with the front LB", started)
        return node

    def cluster_file_text(self) -> str:
        """A cluster file (clusterfile.py) that reaches this cluster as a user's
        own is reached: its dashboard (needs `dashboard`), the front LB as the
        ingress, `docker kill` of the node's container as terminate."""
        if not self.config.dashboard:
            raise HarnessError(f"cluster {self.config.name} runs no dashboard to reach it by")
        lines = [
            f'dashboard = "http://{self.head.ip}:{DASHBOARD_PORT}"',
            f'ingress = "{self.url}"',
            f"serve_port = {SERVE_PORT}",
            *([f"metrics_port = {self.config.metrics_port}"] if self.config.metrics_port else []),
            "",
            "[commands]",
            # A node's container is NAME-RUN-ROLE, and its Ray node name is its role.
            f'terminate = "docker kill {self._resource_name("")}{{name}}"',
        ]
        return "\n".join(lines) + "\n"

    def down(self) -> tuple[int, int]:
        """Remove everything this run created, and nothing of any other run."""
        removed = engine.remove_labelled(run=self.run)
        self._head, self.workers, self.lb, self._network = None, [], None, None
        return removed

    # ------------------------------------------------------------------ nodes

    def _labels(self, role: str) -> dict[str, str]:
        return {
            engine.LABEL: "1",
            engine.CLUSTER_LABEL: self.config.name,
            engine.ROLE_LABEL: role,
            engine.RUN_LABEL: self.run,
            engine.OWNER_LABEL: self.owner,
            **({engine.DETACHED_LABEL: "1"} if self.config.detached else {}),
        }

    def _resource_name(self, role: str) -> str:
        return f"{self.config.name}-{self.run}-{role}"

    @property
    def _network_name(self) -> str:
        return self._resource_name("net")

    def _create_network(self):
        """A bridge with a subnet of its own choosing: only a network with a
        user-set subnet lets a container rejoin with its old address, which the
        partition fault needs (a Ray node must come back under the same IP)."""
        name = self._network_name
        network = engine.create_network(
            name,
            self._labels("network"),
            (f"10.{third}.{sum(map(ord, name)) % 256}.0/24" for third in range(200, 256)),
        )
        if network is not None:
            return network
        raise HarnessError(
            "no free /24 subnet for the cluster network in 10.200-255.x.0; "
            "remove unused Docker networks (`docker network prune`)."
        )

    def _resource_args(self) -> list[str]:
        return [
            # The log monitor streams every worker's output to the drivers; the
            # harness reads Ray's log files instead, and its drivers ask for no
            # output. Off, it saves ~4% of a churning cluster's CPU.
            "--include-log-monitor=false",
            f"--num-cpus={self.config.num_cpus}",
            f"--object-store-memory={self.config.object_store_bytes}",
            *(
                [f"--metrics-export-port={self.config.metrics_port}"]
                if self.config.metrics_port
                else []
            ),
        ]

    def _start_worker(self, number: int) -> Node:
        cfg = self.config
        return self._start_node(
            f"worker-{number}",
            [
                "ray",
                "start",
                f"--address={self.head.ip}:{HEAD_PORT}",
                "--block",
                *self._resource_args(),
                *(
                    [f"--resources={json.dumps(cfg.worker_resources)}"]
                    if cfg.worker_resources
                    else []
                ),
            ],
        )

    def _start_node(self, role: str, command: list[str]) -> Node:
        cfg = self.config
        name = self._resource_name(role)
        container = engine.run_container(
            cfg.image,
            # The Ray node name is the role, as the hostname is (Ray's default
            # is the IP): what a cluster file's {name} is for this cluster.
            [*command, f"--node-name={role}"],
            name=name,
            hostname=role,
            network=self._network_name,
            environment=cfg.node_env,
            shm_size=cfg.shm_size,
            labels=self._labels("head" if role == "head" else "worker"),
            read_only_mounts={str(ROOT / "harness"): f"{HARNESS_MOUNT}/harness"},
        )
        return Node(
            "head" if role == "head" else "worker",
            name,
            engine.ip_address(container, self._network_name),
            container,
        )

    def _start_lb(self) -> Node:
        port = self.config.lb_port
        if not port:
            # Picked now, not at the start: the engine binds it a moment later.
            port = frontlb.free_port()
            self.config = replace(self.config, lb_port=port)
        cfg = self.config
        name = self._resource_name("lb")
        container = engine.create_container(
            cfg.image,
            frontlb.COMMAND,
            name=name,
            hostname="lb",
            network=self._network_name,
            labels=self._labels("lb"),
            publish={frontlb.LISTEN_PORT: ("127.0.0.1", port)},
        )
        engine.put_archive(
            container, frontlb.CONFIG_ROOT, frontlb.config_archive(self.nodes, SERVE_PORT)
        )
        engine.start(container)
        node = Node("lb", name, engine.ip_address(container, self._network_name), container)
        self._wait(
            lambda: engine.status(container) == "running",
            "the front load balancer",
            15,
        )
        return node

    # ------------------------------------------------------------------ node operations
    # What scenarios, the nemesis and benchmarks do to a node. They go through
    # these and never to the engine, so that a cluster on other machines can
    # stand in by providing the same operations.

    def exec_in(self, node: Node, cmd: list[str], check: bool = True) -> tuple[int, str]:
        """Run a command in the node: (exit code, stdout+stderr as text). With
        `check`, a non-zero exit raises, naming the command and its output."""
        return engine.exec_in(node.handle, cmd, check=check)

    def read_file(self, node: Node, path: str) -> str:
        """A file's text, read in the node (`/proc/PID/stat`, say)."""
        return self.exec_in(node, ["cat", path])[1]

    def archive(self, node: Node, path: str) -> bytes:
        """A tar of `path` in the node. Works after the node stopped: a stopped
        node keeps its filesystem until the cluster is removed."""
        return engine.archive(node.handle, path)

    def logs(self, node: Node, tail: int = 15) -> str:
        """The last lines the node's main process (`ray start`, HAProxy) wrote."""
        return engine.logs(node.handle, tail)

    def node_status(self, node: Node) -> str:
        """created, running, paused or exited, as of now."""
        return engine.status(node.handle)

    def exit_state(self, node: Node) -> engine.ExitState:
        """How the node's main process ended: exit code, OOM kill, when."""
        return engine.exit_state(node.handle)

    def exit_time(self, node: Node) -> float | None:
        """When the container's PID 1 (`ray start --block`) ended by itself."""
        state = self.exit_state(node)
        if state.oom_killed or state.exit_code == 137:
            return None
        return state.finished_at

    def kill(self, node: Node) -> bool:
        """SIGKILL the whole node. True if it had already exited by itself (a
        drained, idle raylet shuts down on its own and `ray start --block` ends)."""
        return engine.kill(node.handle)

    def pause(self, node: Node) -> None:
        """Freeze every process of the node (SIGSTOP-like cgroup freeze)."""
        engine.pause(node.handle)

    def unpause(self, node: Node) -> None:
        engine.unpause(node.handle)

    def partition(self, node: Node) -> None:
        """Cut the node off the cluster network; `heal` puts it back."""
        engine.disconnect(self._network, node.handle)

    def heal(self, node: Node) -> None:
        """Reconnect a partitioned node under its old address, so that Ray and
        the LBs find it where they left it."""
        engine.connect(self._network, node.handle, node.ip)

    def slow_link(self, node: Node, rate_kbit: int) -> None:
        """Limit the node's network link to `rate_kbit` each way; `restore_link`
        undoes it."""
        engine.shape_link(node.handle, rate_kbit)

    def restore_link(self, node: Node) -> None:
        engine.unshape_link(node.handle)

    def drop_packets(self, node: Node, fraction: float) -> None:
        """Drop `fraction` of the node's packets each way, at random;
        `stop_dropping_packets` undoes it."""
        engine.drop_packets(node.handle, fraction)

    def stop_dropping_packets(self, node: Node) -> None:
        engine.stop_dropping_packets(node.handle)

    def limit_cpu(self, node: Node, cpus: float) -> None:
        """Cap the node's CPU at `cpus` cores; `unlimit_cpu` lifts it."""
        engine.limit_cpu(node.handle, cpus)

    def unlimit_cpu(self, node: Node) -> None:
        engine.unlimit_cpu(node.handle)

    def node_death_after_s(self) -> float:
        """The shortest silence after which the GCS declares a node dead: its
        failure threshold of consecutive checks, one check period apart."""
        config = self.exec_head(["gcs-health-config"])
        return config["failure_threshold"] * config["period_ms"] / 1000

    def lb_exclude(self, node: Node) -> None:
        """Stop the front LB sending the node new requests (maintenance), as a
        user routes around a node they do not serve from."""
        frontlb.admin_command(
            self._run_in_lb, f"set server {frontlb.BACKEND}/{node.name} state maint"
        )

    # ------------------------------------------------------------------ queries

    def exec_head(self, args: list[str], check: bool = True, timeout_s: float = 120) -> Any:
        """Run the in-cluster agent, `python -m harness.cluster.agent ARGS`, in the
        head; its JSON answer, a dict or a list shaped by the command (see
        harness/cluster/agent)."""
        _log.debug("cluster: agent %s on the head", args[0])
        code, out = self.exec_in(
            self.head, ["python", "-m", "harness.cluster.agent", *args], check=check
        )
        lines = [line for line in out.strip().splitlines() if line.startswith(("{", "["))]
        if not lines:
            raise HarnessError(
                f"no answer from `harness.cluster.agent {args[0]}` (exit {code}):\n{out[-2000:]}"
            )
        return json.loads(lines[-1])

    def ray_nodes(self) -> list[dict[str, Any]]:
        return self.exec_head(["nodes"])

    def alive_ray_nodes(self) -> list[dict[str, Any]]:
        """The GCS's alive nodes; none while it cannot answer yet (it may be
        starting). A head that is not running never will: that goes up."""
        try:
            return [n for n in self.exec_head(["nodes"], check=False) if n["Alive"]]
        except engine.NotRunning:
            raise
        except HarnessError:
            return []

    def deploy(
        self, config: dict[str, Any], timeout_s: float = 180, wait: bool = True
    ) -> dict[str, Any]:
        """Deploy declaratively; with `wait`, until every app is RUNNING."""
        args = ["deploy", json.dumps(config), "--timeout", str(timeout_s if wait else 0)]
        result = self.exec_head(args, check=False)
        if result.get("error"):
            raise HarnessError(
                f"deploying {sorted(result['applications'])} failed: {result['error']}"
            )
        return result

    def actors(self) -> list[dict[str, Any]]:
        return self.exec_head(["actors"])

    def log_lines(
        self, node: Node, needles: list[str], where: str = "/logs/serve/"
    ) -> list[tuple[float, str]]:
        """(time, line) of the node's Ray log lines containing any needle, from
        files whose path contains `where` (Serve's logs, or e.g. `raylet.out`).

        Read from the container's files, so it works after the node stopped
        (a killed container keeps its filesystem until it is removed)."""
        buffer = io.BytesIO(self.archive(node, "/tmp/ray"))
        found = []
        with tarfile.open(fileobj=buffer) as tar:
            for member in tar.getmembers():
                if where not in member.name or not member.isfile():
                    continue
                file = tar.extractfile(member)
                assert file is not None  # a regular file's member has its data
                for raw in file.read().decode(errors="replace").splitlines():
                    if any(needle in raw for needle in needles):
                        stamp = log_time(raw)
                        if stamp is not None:
                            found.append((stamp, raw))
        return sorted(found)

    def metrics_text(self, node: Node | None = None) -> str:
        """Everything a node's metrics agent exports, as Prometheus text (needs
        `metrics_port`); read several metrics from one fetch with `parse_samples`."""
        node = node or self.head
        # A metrics agent exporting hundreds of replicas' metrics on a loaded
        # node can take a while to answer.
        fetch = (
            f"import urllib.request;print(urllib.request.urlopen('http://{node.ip}:"
            f"{self.config.metrics_port}/metrics',timeout=60).read().decode())"
        )
        _, text = self.exec_in(node, ["python", "-c", fetch])
        return text

    def process_cpu_s(self, node: Node, pid: int) -> float:
        """utime + stime of a process in a node, in seconds."""
        stat = self.read_file(node, f"/proc/{pid}/stat")
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def host_pid(self, node: Node, pid: int) -> int:
        """The host's PID of a node's process (a profiler on the host attaches
        to it there)."""
        return engine.host_pid(node.handle, pid)

    def haproxy_pids(self, node: Node) -> list[int]:
        code, out = self.exec_in(node, ["pgrep", "-x", "haproxy"], check=False)
        return [int(pid) for pid in out.split()] if code == 0 else []

    def watch_processes(self, node: Node, name: str, every_s: float) -> ProcessWatch:
        """The PIDs of the node's processes called `name`, each time they
        change, looked at every `every_s` by one command in the node: a
        `docker exec` per look costs the engine ~0.05 core-seconds, which at
        4 looks a second is a tenth of this host's two cores."""
        lines = engine.exec_lines(node.handle, ["sh", "-c", watch_script(name, every_s)])
        first = next(lines, "")
        pid = first.removeprefix("pid ").strip() if first.startswith("pid ") else None

        def stop() -> None:
            if pid:
                self.exec_in(node, ["kill", pid], check=False)

        return ProcessWatch(lines, stop)

    def _run_in_lb(self, argv: list[str]) -> tuple[int, str]:
        if self.lb is None:
            raise HarnessError(f"cluster {self.config.name} has no front LB running")
        return self.exec_in(self.lb, argv)

    def lb_servers(self) -> dict[str, str]:
        """The front LB's view of each node: server name -> status (UP, DOWN, ...)."""
        return frontlb.servers(self._run_in_lb)

    def lb_server_errors(self) -> dict[str, dict[str, int]]:
        """The front LB's error counters for each node (frontlb.ERROR_FIELDS)."""
        return frontlb.server_errors(self._run_in_lb)

    def wait_lb_ready(self, nodes: list[Node] | None = None, timeout_s: float = 90) -> None:
        """Wait until the front LB sees every given node's Serve healthy."""
        want = {n.name for n in (nodes or self.nodes)}
        self._wait(
            lambda: all(self.lb_servers().get(name) == "UP" for name in want),
            f"the front LB to see {sorted(want)} UP",
            timeout_s,
        )

    # ------------------------------------------------------------------ helpers

    def _port_open(self, node: Node, port: int) -> bool:
        probe = f"import socket;socket.create_connection(('127.0.0.1',{port}),1)"
        code, _ = self.exec_in(node, ["python3", "-c", probe], check=False)
        return code == 0

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._ready_while_running(ready, what):
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"timed out after {timeout_s:.0f}s waiting for {what}. {self._diagnosis()}"
                )
            time.sleep(1)

    def _ready_while_running(self, ready, what: str) -> bool:
        """`ready()`, unless a node it looks into has stopped: then the wait
        can never end, and the error says which node stopped and why."""
        try:
            return ready()
        except engine.NotRunning as exc:
            raise HarnessError(f"gave up waiting for {what}: {exc}. {self._diagnosis()}") from None

    def _diagnosis(self) -> str:
        dead = []
        for node in self.nodes + ([self.lb] if self.lb else []):
            status = self.node_status(node)
            if status != "running":
                logs = self.logs(node, tail=15)
                dead.append(f"{node.name} is {status}; last log lines:\n{logs}")
        return "\n".join(dead) or "All containers are running; see `docker logs <name>`."
