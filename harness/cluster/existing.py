"""A Ray cluster the harness did not start: the user's staging cluster on VMs
or KubeRay, described by a cluster file (clusterfile.py).

Everything goes through Ray's own remote interfaces on the cluster's dashboard
and the node commands the file gives; nothing here reaches a node any other way:

    nodes, actors   the State API; an actor's start and end times (which
                    2.60.0's State API does not give, and a preemption's
                    judgement needs) from the GCS's actor table, read by the
                    in-cluster agent run as a Ray job
    apps            Serve's REST API (PUT /api/serve/applications/), with the
                    harness's apps uploaded to the GCS as a py_module
    the spot notice a GCS drain with reason PREEMPTION and a deadline, sent by
                    the agent in a Ray job on the head (as Ray's release chaos
                    tests drain nodes)
    logs            the dashboard's log API, while the node is alive
    metrics         each node's metrics export port (the file's metrics_port)
    health          each node's Serve /-/healthz, as the user's LB sees it
    terminate, add  the file's commands

Every job runs on the head (pinned there by its node id). Log times are read
in the head's time zone, and the head's clock is compared with this host's
before anything changes: the judgement puts both on one time line.

The harness leaves the cluster as it found it except for what a scenario
does: its apps replace the cluster's declaratively deployed apps and stay
deployed after the run, and the nodes it terminates stay terminated.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

from harness.cluster.boundary import (
    Node,
    ProcessWatch,
    RayCluster,
    Unavailable,
    log_time,
    watch_script,
)
from harness.cluster.clusterfile import ClusterFile
from harness.core import log
from harness.core.errors import HarnessError
from harness.core.paths import ROOT

_log = log.get(__name__)

# The State API's node state message for each NodeDeathInfo reason
# (ray/dashboard/utils.py, compose_state_message), mapped back to the reason.
_DEATH_REASONS = {
    "Expected termination": "EXPECTED_TERMINATION",
    "Unexpected termination": "UNEXPECTED_TERMINATION",
    "Terminated due to preemption": "AUTOSCALER_DRAIN_PREEMPTED",
    "Terminated due to idle (no Ray activity)": "AUTOSCALER_DRAIN_IDLE",
}
JOB_TIMEOUT_S = 120.0
STATE_LIMIT = 10_000  # nodes or actors; the State API's default limit is 100
# Ray's SDK clients take their address from these over the one they are given
# (ray/dashboard/utils.py, get_address_for_submission_client).
ADDRESS_VARIABLES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
# The head's clock may differ from this host's by this much: the judgement
# compares the nodes' times (drain deadlines, actors' end times, log lines)
# with this host's (requests, the kill). NTP keeps machines well inside it.
MAX_CLOCK_SKEW_S = 1.0
# The log lines read for one question, from the end of each file: a run's
# worth, not a week of a long-lived cluster's.
LOG_TAIL_LINES = 20_000
# The watch loop ends by itself after this long, should the harness die.
WATCH_LIMIT_S = 3600
_RELEASE = re.compile(r"\d+\.\d+\.\d+")


class ExistingCluster(RayCluster):
    """A node's handle is its Ray node id (hex)."""

    # A Ray job: a supervisor actor, the runtime env, a Python importing Ray
    # (1.6 s a job on this host's Docker clusters).
    command_lead_s = 5.0

    def __init__(self, spec: ClusterFile) -> None:
        self.spec = spec
        self._head: Node | None = None
        self.workers: list[Node] = []
        self._terminated: dict[str, float] = {}  # node id -> when the harness terminated it
        self._harness_uri: str | None = None
        self._jobs = None
        self._serve = None
        # What the cluster runs, as the agent found it (`ray-info`), and how
        # its head's clock and zone stand to this host's: set by `prepare`,
        # kept with each run's history.
        self.found: dict[str, Any] = {}

    # ------------------------------------------------------------------ what it is

    def __enter__(self) -> ExistingCluster:
        self.connect()
        return self

    def connect(self) -> ExistingCluster:
        """Find the head and the alive workers (oldest first). A dashboard that
        does not answer is an error that says where the harness looked."""
        for name in ADDRESS_VARIABLES:
            if os.environ.get(name, self.spec.dashboard).rstrip("/") != self.spec.dashboard:
                raise HarnessError(
                    f"{name}={os.environ[name]} is set, and Ray's clients would use it instead "
                    f"of the dashboard {self.spec.path} names ({self.spec.dashboard}); unset "
                    f"it for this command. Nothing was changed."
                )
        alive = [n for n in self._state_nodes() if n["state"] == "ALIVE"]
        heads = [n for n in alive if n["is_head_node"]]
        if not heads:
            raise HarnessError(
                f"the cluster behind {self.spec.dashboard} has no alive head node "
                f"({len(alive)} alive nodes)"
            )
        self._head = _node(heads[0], "head")
        workers = sorted(
            (n for n in alive if not n["is_head_node"]), key=lambda n: n.get("start_time_ms") or 0
        )
        self.workers = [_node(n, "worker") for n in workers]
        _log.info(
            "existing cluster: head %s and %d workers, via %s",
            self._head.ip,
            len(self.workers),
            self.spec.dashboard,
        )
        return self

    @classmethod
    def prepare(
        cls, spec: ClusterFile, needs: set[str], who: str, settings: Iterable[str]
    ) -> ExistingCluster:
        """The cluster ready for `who` (a scenario, the soak), or a refusal
        (exit 2) before anything on it is changed. The file gives every node
        operation in `needs`; the dashboard answers; some worker has the custom
        resource "w" that keeps the harness's replicas off the head; every
        node's metrics port answers this host (so its Serve port will); the
        cluster runs a Ray release with Serve behind HAProxy; the head's clock
        is within MAX_CLOCK_SKEW_S of this host's. What the cluster runs is read
        into `found`: its Ray, which of `settings` its Serve knows, the head's
        Serve environment, its time zone and clock."""
        spec.require(needs, who)
        cluster = cls(spec).connect()
        nobody = "Nothing was changed."
        if not any("w" in n["Resources"] for n in cluster.alive_ray_nodes()):
            raise HarnessError(
                f"no node of the cluster behind {spec.dashboard} has the custom resource "
                f'"w" that keeps the harness\'s replicas off the head; start the workers '
                f"with --resources='{{\"w\": 10}}'. {nobody}"
            )
        silent = [n.name for n in cluster.nodes if not _port_open(n.ip, spec.metrics_port)]
        if silent:
            raise HarnessError(
                f"this host cannot reach the metrics port {spec.metrics_port} of "
                f"{', '.join(silent)}: the harness talks to each node's Serve port and "
                f"metrics port directly, so run it where the nodes' addresses route. "
                f"{nobody}"
            )
        asked = time.time()
        found = cluster.exec_head(["ray-info", "--settings", ",".join(settings)])
        answered = time.time()
        if not _RELEASE.fullmatch(found["version"]):
            raise HarnessError(
                f"the cluster runs Ray {found['version']}; the harness judges releases "
                f"(X.Y.Z), 2.59.0 or later. {nobody}"
            )
        if found["env"].get("RAY_SERVE_ENABLE_HA_PROXY") != "1":
            raise HarnessError(
                f"the cluster's head runs Serve without HAProxy (RAY_SERVE_ENABLE_HA_PROXY "
                f"is {found['env'].get('RAY_SERVE_ENABLE_HA_PROXY', 'unset')}); every "
                f"scenario is about Serve behind HAProxy. {nobody}"
            )
        # The head's clock read between `asked` and `answered`: its offset from
        # this host's is known to within half that span.
        skew = found["time"] - (asked + answered) / 2
        if abs(skew) - (answered - asked) / 2 > MAX_CLOCK_SKEW_S:
            raise HarnessError(
                f"the head's clock is {skew:+.1f} s from this host's (more than "
                f"{MAX_CLOCK_SKEW_S:g} s): the judgement compares times from both. "
                f"Synchronise the clocks (NTP). {nobody}"
            )
        found["clock_skew_s"] = round(skew, 3)
        found["clock_skew_within_s"] = round((answered - asked) / 2, 3)
        cluster.found = found
        return cluster

    def compare_env(self, wanted: dict[str, str]) -> None:
        """Note, in `found` and as a warning, each Serve setting `wanted` (what
        the harness would start its own nodes with) that the head's env lacks."""
        own = {
            k: v
            for k, v in wanted.items()
            if k.startswith(("RAY_SERVE_", "RAY_health", "RAY_metrics"))
        }
        env = self.found.get("env", {})
        differs = {k: (v, env.get(k)) for k, v in own.items() if env.get(k) != v}
        self.found["env_differs"] = differs
        if differs:
            _log.warning(
                "the cluster's nodes run with Serve settings other than the harness starts "
                "its own nodes with (name: wanted, found): %s",
                ", ".join(f"{k}: {w}, {f}" for k, (w, f) in differs.items()),
            )

    @property
    def flavor(self) -> str:
        """ "patched" if the cluster's Serve reads any of the series' settings."""
        return "patched" if self.found.get("known") else "stock"

    @property
    def head(self) -> Node:
        if self._head is None:
            raise HarnessError(f"not connected to the cluster behind {self.spec.dashboard}")
        return self._head

    @property
    def ingress(self) -> tuple[str, int]:
        return self.spec.ingress_host, self.spec.ingress_port

    @property
    def serve_port(self) -> int:
        return self.spec.serve_port

    @property
    def gcs_address(self) -> str:
        return "auto"

    # ------------------------------------------------------------------ Ray's tables

    def _state(self, what: str, **options: Any) -> list[dict[str, Any]]:
        from ray.util import state

        try:
            listed = getattr(state, f"list_{what}")(
                address=self.spec.dashboard,
                detail=True,
                limit=STATE_LIMIT,
                raise_on_missing_output=False,
                **options,
            )
        except Exception as exc:  # the SDK raises its own and requests' errors
            raise HarnessError(
                f"the Ray dashboard at {self.spec.dashboard} (from {self.spec.path}) did "
                f"not list the cluster's {what}: {exc}"
            ) from None
        return [s if isinstance(s, dict) else dict(vars(s)) for s in listed]

    def _state_nodes(self) -> list[dict[str, Any]]:
        return self._state("nodes")

    def ray_nodes(self) -> list[dict[str, Any]]:
        found = []
        for n in self._state_nodes():
            info = {
                "NodeID": n["node_id"],
                "Alive": n["state"] == "ALIVE",
                "NodeManagerAddress": n["node_ip"],
                "NodeName": n.get("node_name"),
                "Resources": n.get("resources_total") or {},
                "StartTime": (n.get("start_time_ms") or 0) / 1000 or None,
                "EndTime": (n.get("end_time_ms") or 0) / 1000 or None,
            }
            if not info["Alive"]:
                message = n.get("state_message") or ""
                info["DeathReason"] = next(
                    (r for text, r in _DEATH_REASONS.items() if message.startswith(text)),
                    message or None,
                )
            found.append(info)
        return found

    def ray_node_ids(self) -> dict[str, str]:
        """By the node's own id, not its address: a pod restarted in place
        (KubeRay) comes back under the same address as a new Ray node."""
        alive = {n["NodeID"] for n in self.alive_ray_nodes()}
        return {node.name: str(node.handle) for node in self.nodes if node.handle in alive}

    def actors(self) -> list[dict[str, Any]]:
        """With start and end times: the GCS's table, through the agent."""
        return self.exec_head(["actors"])

    def replicas_by_node(self, app: str, deployment: str) -> dict[str, list[dict[str, Any]]]:
        """From the State API (no job): alive replicas need no times."""
        by_node: dict[str, list[dict[str, Any]]] = {}
        for actor in self._state(
            "actors",
            filters=[
                ("class_name", "=", f"ServeReplica:{app}:{deployment}"),
                ("state", "=", "ALIVE"),
            ],
        ):
            by_node.setdefault(actor["node_id"], []).append(
                {"id": actor["actor_id"], "name": actor["name"], "pid": actor["pid"]}
            )
        return by_node

    def controller_pid(self) -> int:
        for actor in self._state("actors", filters=[("name", "=", "SERVE_CONTROLLER_ACTOR")]):
            if actor["state"] == "ALIVE":
                return actor["pid"]
        raise HarnessError("no alive Serve controller; is an app deployed?")

    # ------------------------------------------------------------------ Serve and the GCS

    def _job_client(self):
        if self._jobs is None:
            from ray.job_submission import JobSubmissionClient

            self._jobs = self._sdk(
                "reach the Jobs API", lambda: JobSubmissionClient(self.spec.dashboard)
            )
        return self._jobs

    def _serve_client(self):
        if self._serve is None:
            from ray.dashboard.modules.serve.sdk import ServeSubmissionClient

            self._serve = self._sdk(
                "reach Serve's REST API", lambda: ServeSubmissionClient(self.spec.dashboard)
            )
        return self._serve

    def _sdk(self, what: str, call):
        """A call into Ray's dashboard SDK; what it raises (connection errors,
        an HTTP error, a refused request) becomes an error naming the cluster."""
        try:
            return call()
        except HarnessError:
            raise
        except Exception as exc:
            raise HarnessError(
                f"could not {what} on the Ray dashboard at {self.spec.dashboard} "
                f"(from {self.spec.path}): {type(exc).__name__}: {exc}"
            ) from None

    def _harness_module(self) -> str:
        """The harness package uploaded to the cluster's GCS once (content-
        addressed: an unchanged package is not sent again); its URI."""
        if self._harness_uri is None:
            runtime_env: dict[str, Any] = {
                "py_modules": [str(ROOT / "harness")],
                "excludes": ["__pycache__", "*.pyc"],
            }
            client = self._serve_client()
            self._sdk(
                "upload the harness's apps",
                lambda: client._upload_py_modules_if_needed(runtime_env),
            )
            self._harness_uri = runtime_env["py_modules"][0]
        return self._harness_uri

    def _submit(self, entrypoint: str, runtime_env: dict | None = None) -> str:
        """A Ray job whose driver runs on the head."""
        client = self._job_client()
        return self._sdk(
            f"start a job ({entrypoint})",
            lambda: client.submit_job(
                entrypoint=entrypoint,
                runtime_env=runtime_env,
                entrypoint_label_selector={"ray.io/node-id": str(self.head.handle)},
            ),
        )

    def exec_head(
        self, args: list[str], check: bool = True, timeout_s: float = JOB_TIMEOUT_S
    ) -> Any:
        """The agent as a Ray job on the head; its JSON answer. The job is
        deleted once read, so runs leave no trail of them."""
        client = self._job_client()
        entrypoint = shlex.join(["python", "-m", "harness.cluster.agent", *args])
        job = self._submit(entrypoint, {"py_modules": [self._harness_module()]})
        deadline = time.monotonic() + timeout_s
        try:
            while (
                status := str(self._sdk("follow a job", lambda: client.get_job_status(job)))
            ) not in (
                "SUCCEEDED",
                "FAILED",
                "STOPPED",
            ):
                if time.monotonic() > deadline:
                    self._sdk("stop a job", lambda: client.stop_job(job))
                    raise HarnessError(
                        f"the Ray job {job} ({entrypoint}) did not end in {timeout_s:.0f}s"
                    )
                time.sleep(0.5)
            out = self._sdk("read a job's output", lambda: client.get_job_logs(job))
        finally:
            try:
                client.delete_job(job)
            except Exception:  # a job still stopping is left for Ray to expire
                _log.debug("existing cluster: job %s not deleted", job)
        answer = _last_json(out)
        if answer is None or (check and status != "SUCCEEDED"):
            raise HarnessError(f"the Ray job {job} ({entrypoint}) ended {status}:\n{out[-2000:]}")
        return answer

    def app_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Serve on the file's port, and each app given the harness's apps as
        a py_module (the nodes do not have them)."""
        uri = self._harness_module()
        http_options = {**(config.get("http_options") or {}), "port": self.serve_port}
        return {
            **config,
            "http_options": http_options,
            "applications": [
                {**app, "runtime_env": {**app.get("runtime_env", {}), "py_modules": [uri]}}
                for app in config["applications"]
            ],
        }

    def deploy(
        self, config: dict[str, Any], timeout_s: float = 180, wait: bool = True
    ) -> dict[str, Any]:
        """Serve's REST deploy (`app_config`). Serve keeps the HTTP options it
        started with, whatever a later deploy says: a config whose options
        differ from the running Serve's is an error, not a run judged under
        options it does not have."""
        from ray.serve.schema import HTTPOptionsSchema

        config = self.app_config(config)
        client = self._serve_client()
        details = self._sdk("read Serve's status", client.get_serve_details)
        if (details.get("controller_info") or {}).get("node_id"):  # Serve is running
            # Every option, those the config leaves to their defaults included:
            # Serve keeps what it started with.
            wanted = HTTPOptionsSchema(**config["http_options"]).dict()
            running = details.get("http_options") or {}
            differs = {
                key: (value, running.get(key))
                for key, value in wanted.items()
                if key in running and running[key] != value
            }
            if differs:
                raise HarnessError(
                    "Serve on the cluster runs with other HTTP options than the scenario's "
                    f"(option: wanted, running): {differs}. Serve applies HTTP options only "
                    f"when it starts: run `serve shutdown` on the cluster and try again. "
                    f"Nothing was deployed."
                )
        self._sdk("deploy the apps", lambda: client.deploy_applications(config))
        names = {app["name"] for app in config["applications"]}
        if not wait:
            return {"applications": dict.fromkeys(names, "SUBMITTED")}
        deadline = time.monotonic() + timeout_s
        while True:
            apps = self._sdk("read Serve's status", client.get_serve_details).get(
                "applications", {}
            )
            states = {n: apps[n]["status"] if n in apps else "MISSING" for n in names}
            if all(state == "RUNNING" for state in states.values()):
                return {"applications": states}
            failed = {n: apps[n].get("message") for n, s in states.items() if s == "DEPLOY_FAILED"}
            if failed or time.monotonic() > deadline:
                why = failed or f"not RUNNING in {timeout_s:.0f}s: {states}"
                raise HarnessError(f"deploying {sorted(names)} failed: {why}")
            time.sleep(1.0)

    # ------------------------------------------------------------------ nodes

    def kill(self, node: Node) -> bool:
        node_id = str(node.handle)
        already_exited = not any(n["NodeID"] == node_id for n in self.alive_ray_nodes())
        self.spec.run("terminate", node, node_id)
        self._terminated[node_id] = time.time()
        return already_exited

    def node_status(self, node: Node) -> str:
        if str(node.handle) in self._terminated:
            return "exited"
        alive = {n["NodeID"] for n in self.alive_ray_nodes()}
        return "running" if node.handle in alive else "exited"

    def exit_time(self, node: Node) -> float | None:
        """The GCS's end time of the node, if it ended before the harness
        terminated it (a drained raylet exits by itself)."""
        info = self.ray_node(str(node.handle))
        ended = info.get("EndTime")
        terminated = self._terminated.get(str(node.handle), float("inf"))
        return ended if not info["Alive"] and ended and ended < terminated else None

    def add_worker(self) -> Node:
        """The file's add command, then the first node that joins after it."""
        known = {str(n.handle) for n in self.nodes} | set(self._terminated)
        started = time.monotonic()
        self.spec.run("add")
        deadline = started + 300
        while time.monotonic() < deadline:
            new = [
                n
                for n in self._state_nodes()
                if n["state"] == "ALIVE" and n["node_id"] not in known
            ]
            if new:
                node = _node(new[0], "worker")
                self.workers.append(node)
                log.progress(_log, f"existing cluster: {node.name} ({node.ip}) joined", started)
                return node
            time.sleep(2)
        raise HarnessError("the add command ran, but no new node joined the cluster in 300s")

    def wait_lb_ready(self, nodes: list[Node] | None = None, timeout_s: float = 90) -> None:
        """Every given node's /-/healthz answers 200 (what the user's LB checks)."""
        want = nodes or self.nodes
        deadline = time.monotonic() + timeout_s
        while True:
            unhealthy = [n.name for n in want if _http_status(n.ip, self.serve_port) != 200]
            if not unhealthy:
                return
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"timed out after {timeout_s:.0f}s waiting for /-/healthz of "
                    f"{', '.join(unhealthy)} to answer 200"
                )
            time.sleep(1)

    def lb_server_errors(self) -> dict[str, dict[str, int]]:
        raise Unavailable("the ingress is the user's load balancer; its counters are its own")

    # ------------------------------------------------------------------ observations

    def _on_head(self, node: Node, what: str) -> None:
        """The harness's jobs run on the head, so what needs a command in a
        node is there only for the head."""
        if node.handle != self.head.handle:
            raise Unavailable(f"{what} of {node.name}: only the head runs the harness's jobs")

    def haproxy_pids(self, node: Node) -> list[int]:
        self._on_head(node, "the HAProxy processes")
        return self.exec_head(["haproxy-pids"])

    def watch_processes(self, node: Node, name: str, every_s: float) -> ProcessWatch:
        """The watch loop as a Ray job on the head (ending by itself after
        WATCH_LIMIT_S), its output followed as the job writes it."""
        self._on_head(node, f"the {name} processes")
        client = self._job_client()
        script = f"timeout {WATCH_LIMIT_S} sh -c {shlex.quote(watch_script(name, every_s))}"
        job = self._submit(script)
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            try:
                client.stop_job(job)
            except Exception as exc:  # it ends by itself after WATCH_LIMIT_S
                _log.warning("existing cluster: the watch job %s was not stopped: %s", job, exc)

        return ProcessWatch(_job_lines(client, job, stopped), stop)

    def metrics_text(self, node: Node | None = None) -> str:
        node = node or self.head
        url = f"http://{node.ip}:{self.spec.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return response.read().decode()
        except OSError as exc:
            raise Unavailable(f"{node.name}'s metrics at {url} did not answer: {exc}") from None

    def log_lines(
        self, node: Node, needles: list[str], where: str = "/logs/serve/"
    ) -> list[tuple[float, str]]:
        """From the dashboard's log API (`/api/v0/logs`), which asks the node's
        own agent: a node that is gone has none to ask. Each file's last
        LOG_TAIL_LINES lines; times in the head's zone (`found`)."""
        node_id = str(node.handle)
        # `where` is a path under Ray's log folder ("/logs/serve/", a folder, or
        # "/logs/raylet.out"); the API globs names relative to that folder.
        glob = where.split("/logs/", 1)[-1]
        glob += "*" if glob.endswith("/") or not glob else ""
        try:
            listing = json.loads(self._dashboard_get("/api/v0/logs", node_id=node_id, glob=glob))
            if not listing.get("result"):
                raise OSError(listing.get("msg"))
            names = [
                name
                for files in listing["data"]["result"].values()
                for name in files
                if not name.endswith("/")  # a folder
            ]
            texts = [
                self._dashboard_get(
                    "/api/v0/logs/file", node_id=node_id, filename=name, lines=LOG_TAIL_LINES
                )
                for name in names
            ]
        except (OSError, ValueError) as exc:
            raise Unavailable(f"{node.name}'s logs are not reachable: {exc}") from None
        # Ray writes log times in the node's local time; the head's zone stands
        # for every node's (one cluster, one zone).
        utc_offset = float(self.found.get("utc_offset_s", 0))
        found = []
        for text in texts:
            for raw in text.splitlines():
                if any(needle in raw for needle in needles):
                    stamp = log_time(raw)
                    if stamp is not None:
                        found.append((stamp - utc_offset, raw))
        return sorted(found)

    def _dashboard_get(self, path: str, **query: object) -> str:
        from ray._private.authentication.http_token_authentication import (
            get_auth_headers_if_auth_enabled,
        )

        url = f"{self.spec.dashboard}{path}?{urllib.parse.urlencode({**query, 'timeout': 30})}"
        request = urllib.request.Request(url, headers=get_auth_headers_if_auth_enabled({}))
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read().decode(errors="replace")


def _node(state: dict[str, Any], role: str) -> Node:
    ip = state["node_ip"]
    return Node(role, state.get("node_name") or ip, ip, state["node_id"])


def _last_json(out: str) -> Any:
    """The agent's answer: the last line of its output that parses as JSON
    (Ray's own log lines may start with '[' too)."""
    for line in reversed(out.strip().splitlines()):
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def _http_status(host: str, port: int, path: str = "/-/healthz") -> int | None:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=3) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def _job_lines(client: Any, job: str, stopped: threading.Event) -> Iterator[str]:
    """A job's output, line by line, as it is written (the Jobs API's log
    tail is async; this runs it on a loop of its own, in the reader's thread)."""
    loop = asyncio.new_event_loop()
    chunks = client.tail_job_logs(job)
    pending = ""
    try:
        while True:
            try:
                chunk = loop.run_until_complete(chunks.__anext__())
            except StopAsyncIteration:
                break
            except RuntimeError as exc:  # the tail's WebSocket closed under it
                # Stopping the job closes it that way too; otherwise what the
                # job writes from now on is lost to the run.
                if not stopped.is_set():
                    _log.warning("existing cluster: lost the output of job %s: %s", job, exc)
                break
            *lines, pending = (pending + chunk).split("\n")
            yield from lines
        if pending:
            yield pending
    finally:
        loop.run_until_complete(chunks.aclose())
        loop.close()
