"""The one place that talks to the Docker engine (docker-py, no compose, no CLI).

Everything the harness creates carries the `LABEL` label, so teardown can
remove exactly what the harness made and nothing else, also after a crash.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

from harness.core.errors import HarnessError

LABEL = "rayspot.harness"
CLUSTER_LABEL = "rayspot.cluster"
ROLE_LABEL = "rayspot.role"


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
        docker = None
    if not hasattr(docker, "from_env"):
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
                print(
                    f"{log_prefix}: {text.strip()} ({time.monotonic() - started:.0f}s)", flush=True
                )


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


def labelled_containers(cluster: str | None = None) -> list:
    filters = [f"{LABEL}=1"] + ([f"{CLUSTER_LABEL}={cluster}"] if cluster else [])
    return client().containers.list(all=True, filters={"label": filters})


def labelled_networks(cluster: str | None = None) -> list:
    filters = [f"{LABEL}=1"] + ([f"{CLUSTER_LABEL}={cluster}"] if cluster else [])
    return client().networks.list(filters={"label": filters})


def remove_labelled(cluster: str | None = None) -> tuple[int, int]:
    """Remove the harness's containers and networks (of one cluster, or all).

    Returns (containers, networks) removed. Safe to call repeatedly.
    """
    docker = docker_py()

    containers = labelled_containers(cluster)
    for container in containers:
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    networks = labelled_networks(cluster)
    for network in networks:
        try:
            network.remove()
        except docker.errors.NotFound:
            pass
    return len(containers), len(networks)


def exec_in(container, cmd: list[str], *, check: bool = True) -> tuple[int, str]:
    """Run a command inside a container; output is stdout+stderr as text."""
    code, out = container.exec_run(cmd, demux=False)
    text = (out or b"").decode(errors="replace")
    if check and code != 0:
        raise HarnessError(
            f"`{' '.join(cmd)}` failed in {container.name} (exit {code}):\n{text[-3000:]}"
        )
    return code, text
