"""The HAProxy side of bench-membership: what one membership change costs this
node's Ray's HAProxy manager and the HAProxy process, at a given backend size,
with no controller in the way.

One HAProxyApi, driven the way Serve's HAProxy manager drives it on every
update it receives (set_backend_configs, then apply(), or reload() on a Ray
that has no apply), with one backend of `size` servers. The servers are real
HTTP listeners on 127.0.0.1 in a separate process, one port per server, each
answering with its port number. Which membership path runs is the node's
environment (RAY_SERVE_HAPROXY_* flags), as on a real node.

Per round, one server is added (a new name, a new port) and the oldest one
removed, two changes that keep the size. For each change: the manager's
update time (the call, as the manager's update-latency histogram would time
it, minus its coalesce window); for an addition, the time from the change to
the first answer from the new server through HAProxy's frontend, probed by a
separate process with new connections (so a reload's new process is seen at
once), whose rotation period over the backend bounds the resolution; HAProxy
processes started (sampled every 20 ms). After the last round: the resident
memory of the HAProxy processes.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import shutil
import socket
import tempfile
import threading
import time
from multiprocessing.connection import Connection

from harness.cluster.agent.membership import haproxy_pids

BACKEND = "bench-app"
PROBERS = 8  # concurrent new-connection requests while looking for a server
FIND_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 60.0


# ------------------------------------------------------------------ replicas


def _serve(count: int, conn: Connection) -> None:
    """Listen on `count` ports; answer every HTTP request with the port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method = head.split(b" ", 1)[0]
                close = b"connection: close" in head.lower()
                payload = b"" if method == b"HEAD" else body
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"
                    % (len(body), b"Connection: close\r\n" if close else b"", payload)
                )
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        ports = []
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            body = str(port).encode()
            await asyncio.start_server(functools.partial(answer, body=body), sock=sock, backlog=512)
            ports.append(port)
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(main())


# ------------------------------------------------------------------ prober


def _probe(frontend_port: int, path: str, conn: Connection) -> None:
    """For each port asked for, send requests through HAProxy until one is
    answered by it; reply (monotonic time seen or None, requests sent)."""
    request = f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode()

    async def once() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", frontend_port)
        try:
            writer.write(request)
            data = await reader.read()
        finally:
            writer.close()
        return data.rpartition(b"\r\n\r\n")[2]

    async def find(port: int) -> tuple[float | None, int]:
        wanted = str(port).encode()
        deadline = time.monotonic() + FIND_TIMEOUT_S
        sent = 0
        seen: list[float] = []

        async def worker() -> None:
            nonlocal sent
            while not seen and time.monotonic() < deadline:
                sent += 1
                try:
                    body = await once()
                except OSError:
                    await asyncio.sleep(0.001)
                    continue
                if body == wanted:
                    seen.append(time.monotonic())

        await asyncio.gather(*(worker() for _ in range(PROBERS)))
        return (min(seen) if seen else None), sent

    while True:
        port = conn.recv()
        if port is None:
            return
        conn.send(asyncio.run(find(port)))


# ------------------------------------------------------------------ the bench


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rss_kib(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


class _Sampler:
    """Every HAProxy pid seen on this node, sampled every 20 ms."""

    def __init__(self) -> None:
        self.seen = haproxy_pids()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.seen |= haproxy_pids()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.seen |= haproxy_pids()


async def _bench(size: int, rounds: int) -> dict:
    from ray.serve._private.haproxy import (
        BackendConfig,
        HAProxyApi,
        HAProxyConfig,
        ServerConfig,
    )
    from ray.serve.config import HTTPOptions

    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    replicas = context.Process(target=_serve, args=(size + rounds, theirs), daemon=True)
    replicas.start()
    ports: list[int] = ours.recv()
    workdir = tempfile.mkdtemp(prefix="bench-haproxy-")
    frontend = _free_port()
    config = HAProxyConfig(
        socket_path=os.path.join(workdir, "admin.sock"),
        server_state_base=workdir,
        server_state_file=os.path.join(workdir, "server-state"),
        metrics_socket_path=os.path.join(workdir, "metrics.sock"),
        metrics_enabled=False,
        http_options=HTTPOptions(host="127.0.0.1", port=frontend),
        stats_port=_free_port(),
        metrics_port=_free_port(),
    )
    api = HAProxyApi(cfg=config, config_file_path=os.path.join(workdir, "haproxy.cfg"))
    update = getattr(api, "apply", None) or api.reload

    def servers(members: list[int]) -> dict:
        return {
            BACKEND: BackendConfig(
                name=BACKEND,
                path_prefix="/app",
                app_name="app",
                servers=[
                    ServerConfig(
                        name=f"SERVE_REPLICA__app-d-p{port}",
                        host="127.0.0.1",
                        port=port,
                        replica_id=f"SERVE_REPLICA::app#d#p{port}",
                    )
                    for port in members
                ],
            )
        }

    async def settle() -> None:
        """Until every member is UP in the serving process and the processes a
        reload displaced have exited."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            stats = (await api.get_all_stats()).get(BACKEND, {})
            up = sum(s.is_up for s in stats.values())
            if up >= len(members) and not api.has_alive_old_procs():
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{size} servers did not all come up within {SETTLE_TIMEOUT_S:.0f} s")

    members = ports[:size]
    prober_end, prober_conn = context.Pipe()
    prober = context.Process(target=_probe, args=(frontend, "/app/", prober_conn), daemon=True)
    prober.start()
    changes: list[dict] = []
    sampler = None
    try:
        await api.start()
        api.set_backend_configs(servers(members))
        await update()
        await settle()
        started_pids = haproxy_pids()
        sampler = _Sampler()
        for number in range(rounds):
            new = ports[size + number]
            members = members + [new]
            prober_end.send(new)
            began = time.monotonic()
            api.set_backend_configs(servers(members))
            await update()
            applied = time.monotonic()
            seen, sent = await asyncio.to_thread(prober_end.recv)
            if seen is None:
                raise TimeoutError(
                    f"server {new} was not answering {FIND_TIMEOUT_S:.0f} s after it was added"
                )
            changes.append(
                {
                    "kind": "add",
                    "update_s": applied - began,
                    "routed_s": seen - began,
                    "probe_rate": sent / max(seen - began, 1e-6),
                }
            )
            await settle()
            members = members[1:]
            began = time.monotonic()
            api.set_backend_configs(servers(members))
            await update()
            changes.append({"kind": "remove", "update_s": time.monotonic() - began})
            await settle()
        sampler.stop()
        current = haproxy_pids()
        return {
            "size": size,
            "rounds": rounds,
            "changes": changes,
            "haproxy_started": len(sampler.seen - started_pids),
            "haproxy_rss_kib": _rss_kib(current),
            "haproxy_processes": len(current),
            "config_server_lines": _server_lines(api.config_file_path),
        }
    finally:
        if sampler is not None:
            sampler.stop()
        prober_end.send(None)
        await api.stop()
        for process in (prober, replicas):
            process.kill()
            process.join()
        shutil.rmtree(workdir, ignore_errors=True)


def _server_lines(path: str) -> int:
    """Servers the rendered config declares (a server-template of n counts n)."""
    total = 0
    with open(path) as config:
        for line in config:
            words = line.split()
            if words[:1] == ["server"]:
                total += 1
            elif words[:1] == ["server-template"] and len(words) > 2:
                total += int(words[2].split("-")[-1])
    return total


def haproxy_membership(size: int, rounds: int) -> dict:
    try:
        return asyncio.run(_bench(size, rounds))
    except (TimeoutError, RuntimeError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
