"""The one place that talks to the Docker engine (docker-py, no compose, no CLI).

No other module imports docker-py or touches its container, network or image
objects: the cluster holds each container and network as an opaque handle and
passes it back to the functions here, and listings come back as plain records.

Everything the harness creates carries the `LABEL` label, so teardown can
remove exactly what the harness made and nothing else, also after a crash; a
cluster's containers and network also carry its base name, its run and its
owner (harness/cluster/runs.py), so one run's, or one cluster's, can be told
apart from another's on the same engine.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core import log, proc
from harness.core.errors import HarnessError

_log = log.get(__name__)

if TYPE_CHECKING:
    # For annotations only: docker-py is imported late (docker_py()).
    from docker.models.containers import Container as DockerContainer

LABEL = "rayspot.harness"
CLUSTER_LABEL = "rayspot.cluster"
ROLE_LABEL = "rayspot.role"
RUN_LABEL = "rayspot.run"  # the run id, also in every name the run gives
OWNER_LABEL = "rayspot.owner"  # HOST:PID:START of the process that started the run
DETACHED_LABEL = "rayspot.detached"  # "1": meant to outlive its owner (`harness up`)


def docker_py():
    """The docker-py module, or a HarnessError naming the Python that lacks it.

    Imported late: unit tests of pure logic need no docker-py. A successful
    `import docker` is not enough: run from the repo root, a Python without
    docker-py imports the project's own docker/ folder (the image build files)
    as an empty namespace package, and `from_env` then fails like a missing
    daemon would."""
    try:
        import docker
    except ImportError:
        found = False
    else:
        found = hasattr(docker, "from_env")
    if not found:
        raise HarnessError(
            f"{sys.executable} has no docker-py (the `docker` package), which the harness "
            f"talks to the Docker engine with. Run the harness with the project's venv, "
            f"`.venv/bin/python -m harness ...` from the repo root (or through `make`); "
            f"`make setup` creates it. Nothing was changed."
        )
    return docker


@functools.cache
def client():
    docker = docker_py()
    host = os.environ.get("DOCKER_HOST")
    # A DOCKER_HOST left over from another set-up is a common cause: say which daemon.
    where = (
        f"at DOCKER_HOST={host} (check that a daemon listens there, or unset "
        f"DOCKER_HOST for the local socket)"
        if host
        else "at the local socket (DOCKER_HOST is not set)"
    )
    try:
        engine = docker.from_env(timeout=120)
        engine.ping()
    except Exception as exc:  # docker-py raises several types for "no daemon"
        raise HarnessError(
            f"the Docker daemon is unreachable {where}: {exc}. Start one: as root, `dockerd "
            f">/var/log/dockerd.log 2>&1 &` (install it with `apt-get install docker.io`), "
            f"or `systemctl start docker`. `.ci/run` does both when needed. Nothing was changed."
        ) from exc
    return engine


def image_exists(tag: str) -> bool:
    docker = docker_py()

    try:
        client().images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_image(context: Path, tag: str, buildargs: dict[str, str], log_prefix: str) -> None:
    """Build `context/Dockerfile` as `tag`, streaming the build's steps as progress."""
    started = time.monotonic()
    stream = client().api.build(
        path=str(context),
        tag=tag,
        buildargs=buildargs,
        rm=True,
        forcerm=True,
        decode=True,
        labels={LABEL: "1"},
        network_mode="host",
    )
    tail: list[str] = []
    for chunk in stream:
        if "error" in chunk:
            raise HarnessError(
                f"building {tag} failed: {chunk['error'].strip()}\nlast output:\n"
                + "".join(tail[-20:])
                + "\nNo image was tagged; fix the cause and run again."
            )
        text = chunk.get("stream", "")
        if text:
            tail.append(text)
            if text.startswith("Step "):
                log.progress(_log, f"{log_prefix}: {text.strip()}", started)


def import_rootfs(tar_stream, tag: str) -> None:
    """Turn a root filesystem tarball into an image (the debootstrap base)."""
    repository, _, image_tag = tag.partition(":")
    out = client().api.import_image_from_stream(
        tar_stream, repository=repository, tag=image_tag or "latest"
    )
    for line in out.splitlines() if isinstance(out, str) else [out]:
        status = json.loads(line) if isinstance(line, str) and line.strip() else {}
        if "error" in status:
            raise HarnessError(f"docker import of {tag} failed: {status['error']}")


def try_pull(image: str) -> bool:
    """True if a registry served `image`. Here none answers and this fails fast."""
    try:
        client().images.pull(image)
        return True
    except Exception:
        return False


def tag_image(source: str, tag: str) -> None:
    """Give the image `source` the name `tag` too (`repository:tag`)."""
    client().images.get(source).tag(*tag.split(":"))


# ------------------------------------------------------------------ listings


@dataclass(frozen=True)
class Container:
    """A container the harness made, as a listing shows it."""

    name: str
    status: str  # created, running, paused, exited, ...
    labels: dict[str, str]
    _container: DockerContainer = field(repr=False, compare=False)

    @property
    def image(self) -> str:
        """Its image's first tag, or the image's short id if it has none."""
        image = self._container.image
        if image is None:  # docker-py found no image id on the container
            return "?"
        return image.tags[0] if image.tags else image.short_id

    @property
    def published(self) -> str:
        """Its published ports, `HOST_IP:HOST_PORT->PORT/PROTO`, comma-separated."""
        ports = self._container.attrs.get("HostConfig", {}).get("PortBindings") or {}
        return ", ".join(f"{b[0]['HostIp']}:{b[0]['HostPort']}->{p}" for p, b in ports.items() if b)


@dataclass(frozen=True)
class Network:
    """A network the harness made, as a listing shows it."""

    name: str
    labels: dict[str, str]


def _label_filters(cluster: str | None, run: str | None) -> dict[str, list[str]]:
    return {
        "label": [f"{LABEL}=1"]
        + ([f"{CLUSTER_LABEL}={cluster}"] if cluster else [])
        + ([f"{RUN_LABEL}={run}"] if run else [])
    }


def _containers(cluster: str | None, run: str | None) -> list:
    # Another run's reaper may remove a container between the listing and its
    # inspection: such a container is gone, not an error.
    return client().containers.list(
        all=True, filters=_label_filters(cluster, run), ignore_removed=True
    )


def _networks(cluster: str | None, run: str | None) -> list:
    return client().networks.list(filters=_label_filters(cluster, run))


def labelled_containers(cluster: str | None = None, run: str | None = None) -> list[Container]:
    """The harness's containers: all, one cluster's (every run of it), or one run's."""
    return [Container(c.name, c.status, dict(c.labels), c) for c in _containers(cluster, run)]


def labelled_networks(cluster: str | None = None, run: str | None = None) -> list[Network]:
    return [Network(n.name, dict(n.attrs.get("Labels") or {})) for n in _networks(cluster, run)]


def remove_labelled(
    cluster: str | None = None, run: str | None = None, *, racing: bool = False
) -> tuple[int, int]:
    """Remove the harness's containers and networks (all, one cluster's, or one run's).

    Returns (containers, networks) removed. Safe to call repeatedly. `racing`:
    another process may be removing the same run (two runs reaping one dead
    run at once), so a conflict means it got there first, not a failure.
    """
    docker = docker_py()

    containers = _containers(cluster, run)
    for container in containers:
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            if not racing:
                raise
    networks = _networks(cluster, run)
    for network in networks:
        try:
            network.remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            if not racing:
                raise
    return len(containers), len(networks)


# ------------------------------------------------------------------ containers
# `container` below is the handle run_container or create_container returned.


def run_container(
    image: str,
    command: list[str],
    *,
    name: str,
    hostname: str,
    network: str,
    environment: dict[str, str],
    shm_size: str,
    labels: dict[str, str],
    read_only_mounts: dict[str, str],
):
    """Start a container on `network`; `read_only_mounts` maps host paths to
    where they appear inside. Returns its handle."""
    return client().containers.run(
        image,
        command,
        name=name,
        hostname=hostname,
        detach=True,
        network=network,
        environment=environment,
        shm_size=shm_size,
        labels=labels,
        volumes={host: {"bind": inside, "mode": "ro"} for host, inside in read_only_mounts.items()},
    )


def create_container(
    image: str,
    command: list[str],
    *,
    name: str,
    hostname: str,
    network: str,
    labels: dict[str, str],
    publish: dict[int, tuple[str, int]],
):
    """Create, not start, a container whose TCP ports `publish` maps to
    (host address, host port). Returns its handle."""
    return client().containers.create(
        image,
        command,
        name=name,
        hostname=hostname,
        network=network,
        labels=labels,
        ports={f"{port}/tcp": address for port, address in publish.items()},
    )


def put_archive(container, path: str, tar: bytes) -> None:
    """Unpack a tar into the container at `path` (before it starts, say)."""
    container.put_archive(path, tar)


def start(container) -> None:
    container.start()


def ip_address(container, network: str) -> str:
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


def status(container) -> str:
    """created, running, paused, exited, ..., as of now."""
    container.reload()
    return container.status


@dataclass(frozen=True)
class ExitState:
    """How a container's main process ended, as far as the engine knows."""

    exit_code: int | None
    oom_killed: bool
    finished_at: float | None  # time.time() of the end; None if it has not ended


def exit_state(container) -> ExitState:
    container.reload()
    state = container.attrs["State"]
    finished = state.get("FinishedAt", "")
    # A container that has not ended says 0001-01-01.
    finished_at = None if not finished or finished.startswith("0001") else _engine_time(finished)
    return ExitState(state.get("ExitCode"), bool(state.get("OOMKilled")), finished_at)


def _engine_time(text: str) -> float:
    """The engine's RFC 3339 UTC time: nanoseconds, which strptime cannot take
    (microseconds are kept), and no fraction at all when they are zero."""
    stamp = text[:26].rstrip("Z")
    layout = "%Y-%m-%dT%H:%M:%S.%f" if "." in stamp else "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(stamp, layout).replace(tzinfo=UTC).timestamp()


def logs(container, tail: int) -> str:
    """The last `tail` lines the container's main process wrote."""
    return container.logs(tail=tail).decode(errors="replace")


def archive(container, path: str) -> bytes:
    """A tar of `path` in the container; works on a stopped container too."""
    chunks, _ = container.get_archive(path)
    return b"".join(chunks)


def kill(container) -> bool:
    """SIGKILL the container. True if it had already exited by itself."""
    docker = docker_py()

    container.reload()
    if container.status != "running":
        return True
    try:
        container.kill()
    except docker.errors.APIError:
        container.reload()
        return container.status != "running"
    return False


def pause(container) -> None:
    """Freeze every process of the container (the cgroup freezer)."""
    container.pause()


def unpause(container) -> None:
    container.unpause()


class NotRunning(HarnessError):
    """A command was to run in a container that is not running (it exited, or
    is paused): no exit code can be had from it."""


def exec_in(container, cmd: list[str], *, check: bool = True) -> tuple[int, str]:
    """Run a command inside a container; output is stdout+stderr as text.
    Raises NotRunning, whatever `check`, when the container is not running."""
    docker = docker_py()

    try:
        code, out = container.exec_run(cmd, demux=False)
    except docker.errors.APIError as exc:
        # The engine answers 409 Conflict to an exec in a stopped or paused container.
        if exc.status_code != 409:
            raise
        raise NotRunning(
            f"`{' '.join(cmd)}` cannot run in {container.name}: {exc.explanation or exc}"
        ) from None
    text = (out or b"").decode(errors="replace")
    if check and code != 0:
        raise HarnessError(
            f"`{' '.join(cmd)}` failed in {container.name} (exit {code}):\n{text[-3000:]}"
        )
    return code, text


def exec_lines(container, cmd: list[str]) -> Iterator[str]:
    """Run a command inside a container and yield its output line by line as
    it comes (stdout and stderr), until the command exits or the container
    is removed."""
    _, chunks = container.exec_run(cmd, stream=True, demux=False)
    pending = b""
    try:
        for chunk in chunks:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode(errors="replace")
    except Exception as exc:  # the container went away under the stream
        _log.debug("exec stream in %s ended: %s", container.name, exc)
    if pending:
        yield pending.decode(errors="replace")


# ------------------------------------------------------------------ link shaping

# A token bucket on both directions of a container's link: its own eth0 (what
# it sends) and the host's end of its veth pair (what it receives). Shaped from
# the host (`nsenter` into the container's network namespace), so the node
# needs no NET_ADMIN; deleting the qdiscs restores each end's default.
_TBF_BURST, _TBF_LATENCY = "8kb", "2s"
_SHAPING_NEEDS = (
    "Shaping a node's link needs root on the host, with `tc` and `nsenter` "
    "(Debian packages iproute2 and util-linux)."
)


def _run_on_host(cmd: list[str], needs: str) -> str:
    """Run a host command for a fault; its output, or an error that says what
    failed and what the fault needs."""
    done = proc.run(cmd, timeout=30)
    if done.returncode != 0:
        raise HarnessError(
            f"`{' '.join(cmd)}` failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}\n{needs}"
        )
    return done.stdout


@dataclass(frozen=True)
class _LinkEnd:
    # The argv prefix that runs a command where this end lives (empty: the host).
    where: tuple[str, ...]
    device: str

    def tc(self, verb: str, *args: str) -> str:
        return _run_on_host(
            [*self.where, "tc", "qdisc", verb, "dev", self.device, *args], _SHAPING_NEEDS
        )

    def shaped(self) -> bool:
        return " tbf " in self.tc("show")


def host_pid(container, pid: int) -> int:
    """The host's PID of the process a container knows as `pid`: the one in
    the container's PID namespace whose innermost PID (NSpid) is `pid`."""
    container.reload()
    init = container.attrs["State"]["Pid"]
    namespace = os.readlink(f"/proc/{init}/ns/pid")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/pid") != namespace:
                continue
            with open(f"/proc/{entry.name}/status") as status:
                nspid = next(line for line in status if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue  # exited meanwhile, or not ours to read
        if int(nspid.split()[-1]) == pid:
            return int(entry.name)
    raise HarnessError(f"no process {pid} in {container.name}")


def _netns(container) -> tuple[str, ...]:
    """The argv prefix that runs a host command in the container's network
    namespace."""
    container.reload()
    return ("nsenter", "-t", str(container.attrs["State"]["Pid"]), "-n")


def _link_ends(container) -> tuple[_LinkEnd, _LinkEnd]:
    inside = _netns(container)
    # `ip` answers from the namespace it runs in ("7: eth0@if8: ..."); sysfs
    # would answer from the host's, where it is mounted.
    done = proc.run([*inside, "ip", "-o", "link", "show", "eth0"], timeout=30)
    peer = re.search(r"eth0@if(\d+):", done.stdout)
    if done.returncode != 0 or peer is None:
        raise HarnessError(
            f"cannot read {container.name}'s link from its network namespace: "
            f"{(done.stderr or done.stdout).strip()}"
        )
    iflink = peer.group(1)
    for name in sorted(os.listdir("/sys/class/net")):
        if Path(f"/sys/class/net/{name}/ifindex").read_text().strip() == iflink:
            return _LinkEnd(inside, "eth0"), _LinkEnd((), name)
    raise HarnessError(f"the host's end of {container.name}'s link (ifindex {iflink}) is gone")


def shape_link(container, rate_kbit: int) -> None:
    """Limit the container's link to `rate_kbit` in each direction; what goes
    beyond queues (up to _TBF_LATENCY) and then drops. Refuses a link another
    tool already shaped, and leaves nothing behind if the second end fails."""
    ends = _link_ends(container)
    for end in ends:
        shown = end.tc("show")
        if "root" in shown and "noqueue" not in shown:
            raise HarnessError(f"{container.name}'s link is already shaped: {shown.strip()}")
    added: list[_LinkEnd] = []
    try:
        for end in ends:
            end.tc(
                "add",
                "root",
                "tbf",
                "rate",
                f"{rate_kbit}kbit",
                "burst",
                _TBF_BURST,
                "latency",
                _TBF_LATENCY,
            )
            added.append(end)
    except BaseException:
        for end in added:
            end.tc("del", "root")
        raise


def unshape_link(container) -> None:
    """Remove what `shape_link` added; each end's default comes back."""
    for end in _link_ends(container):
        if end.shaped():
            end.tc("del", "root")


# Random loss of packets both ways, by iptables rules in the container's
# network namespace, marked with this comment so only they are removed.
_LOSS_MARK = "rayspot-packet-loss"


def _loss_rule(fraction: float) -> list[str]:
    return [
        "-m",
        "statistic",
        "--mode",
        "random",
        "--probability",
        f"{fraction:.4f}",
        "-m",
        "comment",
        "--comment",
        _LOSS_MARK,
        "-j",
        "DROP",
    ]


def _iptables(container, *args: str) -> str:
    return _run_on_host(
        [*_netns(container), "iptables", *args],
        "Dropping a node's packets needs root on the host, with `iptables` (and its "
        "statistic match) and `nsenter`.",
    )


def drop_packets(container, fraction: float) -> None:
    """Drop `fraction` of the packets the container sends and receives, at
    random. Refuses a container that already drops some; leaves no rule
    behind if the second one fails."""
    if _LOSS_MARK in _iptables(container, "-S"):
        raise HarnessError(f"{container.name} already drops packets")
    added: list[str] = []
    try:
        for chain in ("INPUT", "OUTPUT"):
            _iptables(container, "-I", chain, "1", *_loss_rule(fraction))
            added.append(chain)
    except BaseException:
        for chain in added:
            _iptables(container, "-D", chain, *_loss_rule(fraction))
        raise


def stop_dropping_packets(container) -> None:
    """Remove the rules `drop_packets` added, whatever their fraction."""
    for line in _iptables(container, "-S").splitlines():
        if _LOSS_MARK in line and line.startswith("-A "):
            _iptables(container, "-D", *line.split()[1:])


def limit_cpu(container, cpus: float) -> None:
    """Cap the container's CPU at `cpus` cores (a CFS quota)."""
    period_us = 100_000
    container.update(cpu_period=period_us, cpu_quota=max(1000, int(cpus * period_us)))


def unlimit_cpu(container) -> None:
    """Lift the cap `limit_cpu` set (no quota, as the harness starts nodes)."""
    container.update(cpu_quota=-1)


# ------------------------------------------------------------------ networks


def create_network(name: str, labels: dict[str, str], subnets: Iterable[str]):
    """A bridge network on the first of `subnets` that overlaps no existing
    network; its handle, or None if every one overlaps."""
    docker = docker_py()

    for subnet in subnets:
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        try:
            return client().networks.create(name, driver="bridge", ipam=ipam, labels=labels)
        except docker.errors.APIError as exc:
            if "overlap" not in str(exc).lower():
                raise
    return None


def disconnect(network, container) -> None:
    """Cut the container off the network (its address is kept for reconnecting)."""
    network.disconnect(container, force=True)


def connect(network, container, ip: str) -> None:
    """Put the container back on the network under its old address `ip`."""
    network.connect(container, ipv4_address=ip)
