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
it, minus its coalesce window), the garbage collections the interpreter ran
inside it (their total, the longest, how many were full), and HAProxy
processes started (sampled every 20 ms). For an addition, the time from the
change to the first answer from the new server through HAProxy's frontend.

That last figure is sharp at any size because the backend balances
`leastconn` (Serve's default): before each addition the prober holds one open
request on every member ("anchors"), so the added server, with none, is the
least loaded and HAProxy's first choice as soon as it can route to it. The
prober's requests are held requests too: the listener sends its port at once
and keeps the response open, so each probe is answered by whichever server
HAProxy picked. A reload starts a process that has none of the anchors; there
the probes rotate over the backend and one pass at their rate bounds the
resolution (the host reports which applied).

Measured at rest, after the first apply: the resident memory and open file
descriptors of the HAProxy processes. After the rounds, the cost of servers
draining: the manager's process CPU and HAProxy's over a window with
`draining` servers removed while their anchors stay open (as a long stream
keeps a replica draining), against a window just before with none.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import multiprocessing
import os
import resource
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from harness.cluster.agent.haproxy_stat import stat_rows
from harness.cluster.agent.membership import haproxy_pids

BACKEND = "bench-app"
PREFIX = "/app"
PROBERS = 8  # concurrent requests while looking for a server
ANCHORING = 32  # concurrent requests while anchoring the members
FIND_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0  # one request's connect, answer or release
SETTLE_TIMEOUT_S = 60.0
DRAIN_WINDOW_S = 10.0
# After the removal that starts the drain, before its window: the apply's own
# work and the sweep's first passes are not the steady cost.
DRAIN_SETTLE_S = 3.0
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ replicas


def _raise_fd_limit() -> None:
    """Thousands of listeners and held requests need more than a default soft
    limit of file descriptors: up to the hard one."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _serve(count: int, conn: Connection) -> None:
    """Listen on `count` ports. A request for .../hold?id=<n> gets its headers
    and the port as a first chunk at once, and its last chunk once a request
    for .../release?id=<n> reaches any of the ports (they share this process);
    any other request (a probe, HAProxy's health checks) is answered with the
    port at once."""
    _raise_fd_limit()
    releases: dict[bytes, asyncio.Event] = {}

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: bytes):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path = (head.split(b" ", 2) + [b"", b""])[:2]
                if b"/hold?id=" in path:
                    released = releases.setdefault(path.rpartition(b"=")[2], asyncio.Event())
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n"
                        % (len(port), port)
                    )
                    await writer.drain()
                    # Until released, or until HAProxy drops the connection (a
                    # hard-stopped worker): a socket left waiting would hold a
                    # file descriptor here for good.
                    release = asyncio.ensure_future(released.wait())
                    dropped = asyncio.ensure_future(reader.read())
                    await asyncio.wait({release, dropped}, return_when=asyncio.FIRST_COMPLETED)
                    releases.pop(path.rpartition(b"=")[2], None)
                    if release.done():
                        dropped.cancel()
                        # The response ends, so HAProxy ends the request: a
                        # client closing its side alone would leave it open
                        # until HAProxy next writes to it.
                        writer.write(b"0\r\n\r\n")
                        await writer.drain()
                    else:
                        release.cancel()
                    break
                if b"/release?id=" in path:
                    releases.setdefault(path.rpartition(b"=")[2], asyncio.Event()).set()
                close = b"connection: close" in head.lower()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"
                    % (
                        len(port),
                        b"Connection: close\r\n" if close else b"",
                        b"" if method == b"HEAD" else port,
                    )
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
            await asyncio.start_server(functools.partial(answer, port=body), sock=sock, backlog=512)
            ports.append(port)
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(main())


# ------------------------------------------------------------------ prober


def settled_ports(stats_csv: str) -> set[int]:
    """The ports of the servers in a `show stat` answer that are settled UP:
    status "UP" (not "UP 1/2", which is still rising or falling, nor DRAIN or
    MAINT), with a health check completed ("INI" until the first one ends;
    "* L7OK" is one running after a pass). An answer that is not a stats dump
    ("No such proxy.") has none."""
    ports = set()
    for row in stat_rows(stats_csv) or []:
        checked = row.get("check_status", "").lstrip("* ") not in ("", "INI")
        port = row.get("addr", "").rpartition(":")[2]
        if row.get("status") == "UP" and checked and port.isdigit():
            ports.add(int(port))
    return ports


class _Prober:
    """Requests through HAProxy's frontend: held ones on the members (anchors),
    and probes for an added server. Runs in its own process, driven over a
    pipe."""

    def __init__(self, frontend_port: int, admin_socket: str) -> None:
        self.frontend_port = frontend_port
        self.admin_socket = admin_socket
        self.anchors: dict[int, tuple[int, asyncio.Task]] = {}  # port -> (hold id, its task)
        self._ids = itertools.count()

    async def _request(self, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.frontend_port), REQUEST_TIMEOUT_S
        )
        writer.write(f"GET {PREFIX}{path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        return reader, writer

    async def _answered_by(self, path: str) -> int:
        """A complete request: the port of the server that answered it."""
        reader, writer = await self._request(path)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            if not head.startswith(b"HTTP/1.1 200"):
                raise ValueError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            return int(await asyncio.wait_for(reader.readexactly(length), REQUEST_TIMEOUT_S))
        finally:
            writer.close()

    async def _hold(self) -> tuple[int, int, asyncio.StreamReader, asyncio.StreamWriter]:
        """A held request: its id, the port of the server holding it, and its streams."""
        hold_id = next(self._ids)
        reader, writer = await self._request(f"/hold?id={hold_id}")
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            if not head.startswith(b"HTTP/1.1 200"):
                raise ValueError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            size = int((await reader.readline()).strip(), 16)
            return hold_id, int(await reader.readexactly(size)), reader, writer
        except BaseException:
            writer.close()
            raise

    def _keep(
        self, hold_id: int, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.ensure_future(self._held(port, reader, writer))
        self.anchors[port] = (hold_id, task)

    async def _held(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Until the response ends (released: its last chunk; or its
        connection cut, as by a hard-stopped worker); then the anchor is gone.
        HAProxy keeps the client's connection open after a response, so the
        last chunk, not the end of the stream, says it ended."""
        try:
            await reader.readuntil(b"0\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            if self.anchors.get(port, (None, None))[1] is asyncio.current_task():
                del self.anchors[port]

    async def _end(self, hold_id: int, task: asyncio.Future) -> None:
        """End a held request and wait until its response has ended."""
        await self._answered_by(f"/release?id={hold_id}")
        try:
            await asyncio.wait_for(asyncio.shield(task), REQUEST_TIMEOUT_S)
        except TimeoutError:
            task.cancel()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # its connection went first: ended all the same

    async def release(self, port: int) -> None:
        """End the anchor on `port`, if any."""
        if port in self.anchors:
            await self._end(*self.anchors[port])

    async def anchor(self, members: list[int], fresh: bool) -> dict:
        """One held request on each member. `fresh` first drops every anchor:
        after a reload they sit in a retired process."""
        wanted = set(members)
        for port in list(self.anchors):
            if fresh or port not in wanted:
                await self.release(port)
        limit = 3 * len(wanted) + 100
        attempts = 0

        async def worker() -> None:
            nonlocal attempts
            while wanted - self.anchors.keys() and attempts < limit:
                attempts += 1
                try:
                    hold_id, port, reader, writer = await self._hold()
                except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
                    await asyncio.sleep(0.01)
                    continue
                if port in wanted and port not in self.anchors:
                    self._keep(hold_id, port, reader, writer)
                else:
                    # A second hold on a member (anchors sent at once can meet):
                    # ended, not just closed, so HAProxy counts it gone.
                    extra = asyncio.ensure_future(reader.readuntil(b"0\r\n\r\n"))
                    await self._end(hold_id, extra)
                    writer.close()

        await asyncio.gather(*(worker() for _ in range(ANCHORING)))
        return {"anchored": len(wanted & self.anchors.keys()), "attempts": attempts}

    async def find(self, port: int) -> dict:
        """Complete requests until one is answered by `port`: when it was seen
        (monotonic, or None), the probes completed, and their median round trip."""
        deadline = time.monotonic() + FIND_TIMEOUT_S
        trips: list[float] = []
        seen: list[float] = []

        async def worker() -> None:
            while not seen and time.monotonic() < deadline:
                sent = time.monotonic()
                try:
                    got = await self._answered_by("/")
                except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
                    await asyncio.sleep(0.001)
                    continue
                trips.append(time.monotonic() - sent)
                if got == port and not seen:
                    seen.append(time.monotonic())

        began = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(PROBERS)))
        trips.sort()
        return {
            "seen": seen[0] if seen else None,
            "completed_per_s": len(trips) / max(time.monotonic() - began, 1e-6),
            "round_trip_s": trips[len(trips) // 2] if trips else None,
        }

    async def up(self, members: list[int]) -> int:
        """How many of `members` the serving HAProxy process has settled UP
        (`settled_ports`); 0 while its admin socket does not answer (a
        process being replaced), so the caller asks again.

        Read here rather than through the manager, so the manager's process
        does only the manager's work: parsing thousands of servers' stats 20
        times a second would add its garbage, and so its collections, to the
        updates measured."""
        try:
            answer = await asyncio.wait_for(
                self._admin(f"show stat {BACKEND} 4 -1"), REQUEST_TIMEOUT_S
            )
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return 0
        return len(settled_ports(answer) & set(members))

    async def _admin(self, command: str) -> str:
        """One command on HAProxy's admin socket, which answers and closes."""
        reader, writer = await asyncio.open_unix_connection(self.admin_socket)
        try:
            writer.write(f"{command}\n".encode())
            await writer.drain()
            return (await reader.read()).decode()
        finally:
            writer.close()
            await writer.wait_closed()

    async def serve(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command is None:
                for port in list(self.anchors):
                    await self.release(port)
                return
            name, args = command
            conn.send(await getattr(self, name)(*args))


def _probe(frontend_port: int, admin_socket: str, conn: Connection) -> None:
    _raise_fd_limit()
    asyncio.run(_Prober(frontend_port, admin_socket).serve(conn))


# ------------------------------------------------------------------ the bench


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _per_process_total(pids: set[int], read: Callable[[int], float]) -> float:
    """`read(pid)` summed over the processes; one that exited counts 0."""
    total = 0.0
    for pid in pids:
        try:
            total += read(pid)
        except OSError:
            continue
    return total


def _rss_kib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _open_fds(pid: int) -> float:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _cpu_s(pid: int) -> float:
    """User and system CPU of the process so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


class _Collections:
    """The interpreter's garbage collections on this thread between `began()`
    and `ended()`. A full collection walks every object the process holds,
    Ray's own included, and lands in whatever code allocates when its
    threshold is crossed: an update's time includes the collections it ran,
    and this says how much of it they were. Collections on other threads (the
    pid sampler's) hold the lock the update waits for only as any other
    thread's work does, and are left out."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        self._open = False
        self._started: float | None = None
        self._window = _Collected()

    def _on_collection(self, phase: str, info: dict) -> None:
        if not self._open or threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._started = time.monotonic()
        elif self._started is not None:
            took = time.monotonic() - self._started
            self._started = None
            self._window.total_s += took
            self._window.longest_s = max(self._window.longest_s, took)
            self._window.full += info["generation"] == 2

    def start(self) -> None:
        gc.callbacks.append(self._on_collection)

    def stop(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def began(self) -> None:
        self._open, self._started, self._window = True, None, _Collected()

    def ended(self) -> _Collected:
        self._open = False
        return self._window


@dataclass
class _Collected:
    total_s: float = 0.0
    longest_s: float = 0.0
    full: int = 0  # of the oldest generation: every object walked

    def fields(self) -> dict:
        return {
            "collections_s": self.total_s,
            "longest_collection_s": self.longest_s,
            "full_collections": self.full,
        }


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


async def _cpu_window(seconds: float) -> dict:
    """CPU per second of this process (the manager) and of HAProxy's processes
    over `seconds`."""
    pids = haproxy_pids()
    mine, theirs, began = time.process_time(), _per_process_total(pids, _cpu_s), time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - began
    return {
        "manager_cpu_per_s": (time.process_time() - mine) / elapsed,
        "haproxy_cpu_per_s": (_per_process_total(pids | haproxy_pids(), _cpu_s) - theirs) / elapsed,
    }


async def _bench(size: int, rounds: int, draining: int) -> dict:
    from ray.serve._private import haproxy as haproxy_module
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
    theirs.close()  # so a replica process that dies is an EOFError here, not a hang
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
        # Room for an anchor on every server and the probes; no more, as each
        # connection costs HAProxy two of the node's file descriptors.
        maxconn=max(HAProxyConfig.maxconn, size + rounds + 4 * max(PROBERS, ANCHORING)),
    )
    api = HAProxyApi(cfg=config, config_file_path=os.path.join(workdir, "haproxy.cfg"))
    # This process set up as the installed Ray's HAProxyManager sets up its
    # own: one that applies the proxy actor's garbage-collector options (its
    # module imports them) applies them once its HAProxyApi exists.
    configure_gc = getattr(haproxy_module, "_configure_gc_options", None)
    if configure_gc is not None:
        configure_gc()
    update = getattr(api, "apply", None) or api.reload

    def servers(members: list[int]) -> dict:
        return {
            BACKEND: BackendConfig(
                name=BACKEND,
                path_prefix=PREFIX,
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
            # The retired processes first: an answer read before one exits
            # could be its own.
            if not api.has_alive_old_procs() and await ask("up", members) >= len(members):
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{size} servers did not all come up within {SETTLE_TIMEOUT_S:.0f} s")

    members = ports[:size]
    prober_end, prober_conn = context.Pipe()
    prober = context.Process(
        target=_probe, args=(frontend, config.socket_path, prober_conn), daemon=True
    )
    prober.start()
    prober_conn.close()

    async def ask(name: str, *args):
        prober_end.send((name, args))
        return await asyncio.to_thread(prober_end.recv)

    changes: list[dict] = []
    sampler = None
    garbage = _Collections()
    garbage.start()
    try:
        await api.start()
        api.set_backend_configs(servers(members))
        await update()
        await settle()
        at_rest = haproxy_pids()
        rest = {
            "haproxy_rss_kib": _per_process_total(at_rest, _rss_kib),
            "haproxy_fds": _per_process_total(at_rest, _open_fds),
            "haproxy_processes": len(at_rest),
        }
        sampler = _Sampler()
        started_seen = len(sampler.seen)
        for number in range(rounds):
            reloaded_since = len(sampler.seen) != started_seen
            started_seen = len(sampler.seen)
            # Held requests help only where the next change keeps the process:
            # after a reload they sit in a retired one, so a configuration that
            # reloads (its first change shows it) is probed without them.
            anchoring = (
                {"anchored": 0, "attempts": 0}
                if reloaded_since and number > 0
                else await ask("anchor", members, reloaded_since)
            )
            if (not reloaded_since or number == 0) and anchoring["anchored"] < len(members):
                raise RuntimeError(
                    f"{anchoring['anchored']} of {len(members)} servers held a request after "
                    f"{anchoring['attempts']} tries; added -> routed would not be sharp"
                )
            new = ports[size + number]
            members = members + [new]
            prober_end.send(("find", (new,)))
            before = len(sampler.seen)
            garbage.began()
            began = time.monotonic()
            # The configs are built inside the clock, as the manager builds
            # them from the controller's broadcast inside its update.
            api.set_backend_configs(servers(members))
            await update()
            applied = time.monotonic()
            collected = garbage.ended()
            found = await asyncio.to_thread(prober_end.recv)
            seen = found["seen"]
            if seen is None:
                raise TimeoutError(
                    f"server {new} was not answering {FIND_TIMEOUT_S:.0f} s after it was added"
                )
            changes.append(
                {
                    "kind": "add",
                    "update_s": applied - began,
                    **collected.fields(),
                    "routed_s": seen - began,
                    "completed_per_s": found["completed_per_s"],
                    "round_trip_s": found["round_trip_s"],
                    "anchored": anchoring["anchored"],
                    "reloaded": len(sampler.seen) != before,
                }
            )
            await settle()
            oldest, members = members[0], members[1:]
            await ask("release", oldest)
            garbage.began()
            began = time.monotonic()
            api.set_backend_configs(servers(members))
            await update()
            update_s = time.monotonic() - began
            changes.append({"kind": "remove", "update_s": update_s, **garbage.ended().fields()})
            await settle()
        sampler.stop()
        started = len(sampler.seen - at_rest)
        # The drain: `draining` members removed while their anchors stay open,
        # against a window just before with the same wait after the same call.
        await ask("anchor", members, started > 0)
        api.set_backend_configs(servers(members))
        await update()
        # Read after an update that changes nothing, which renders the file in
        # full: runtime servers render it about a second after changes they
        # sent on their own.
        server_lines = _server_lines(api.config_file_path)
        await asyncio.sleep(DRAIN_SETTLE_S)
        idle = await _cpu_window(DRAIN_WINDOW_S)
        members = members[draining:]
        api.set_backend_configs(servers(members))
        await update()
        await asyncio.sleep(DRAIN_SETTLE_S)
        drain = await _cpu_window(DRAIN_WINDOW_S)
        return {
            "size": size,
            "rounds": rounds,
            "changes": changes,
            "haproxy_started": started,
            **rest,
            "config_server_lines": server_lines,
            "draining": draining,
            "idle": idle,
            "drain": drain,
        }
    finally:
        garbage.stop()
        if sampler is not None:
            sampler.stop()
        try:
            prober_end.send(None)
        except OSError:
            pass  # the prober is gone; it is killed below either way
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


def haproxy_membership(size: int, rounds: int, draining: int) -> dict:
    try:
        return asyncio.run(_bench(size, rounds, draining))
    except (TimeoutError, RuntimeError, OSError, EOFError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
