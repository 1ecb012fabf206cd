"""The timeout ladder (node retirement inside a spot notice): one model of its
knobs, the orderings A-J checked on it (docs/architecture.md, "The timeout
ladder", says what each protects), and the one factor that scales it down for
short test runs.

Scaling multiplies every time the service sets by one factor, so every ordering
between them holds at any scale. Two of Ray's values do not scale because they are
constants in 2.60.0 (SHUTDOWN_BUFFER_S = 5, PROXY_DRAIN_CHECK_PERIOD_S = 5);
`orderings()` checks the scaled ladder against them too, so a factor that would
break an ordering is refused rather than silently run.

An ordering is "unknown", never "pass", when it needs a value that only the
environment fixes (the app's longest request, the external load balancer, the
clients, the spot notice) and the description does not give it.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, replace

from harness.core.errors import HarnessError
from harness.ladder.defaults import (
    HAPROXY_DEFAULT_RETRIES,
    PROXY_DRAIN_CHECK_PERIOD_S,
    RAY_GST_DEFAULT_S,
    RAY_KEEP_ALIVE_DEFAULT_S,
    RAY_SIGTERM_DRAIN_DEFAULT_S,
    RAY_TIMEOUT_CLIENT_DEFAULT_S,
    RAY_TIMEOUT_CONNECT_DEFAULT_S,
    RAY_WAIT_LOOP_DEFAULT_S,
    SET_BY,
    SHUTDOWN_BUFFER_S,
)
from harness.ladder.notice import SpotNotice

# Patch 0004 (off by default): a stopping ingress replica behind HAProxy gets a
# force-kill budget that covers the request timeout (ordering E) instead of
# 2.60.0's MIN + 5 s. Stock Ray ignores the setting.
FORCE_KILL_COVERS_REQUEST_TIMEOUT = {
    "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_COVERS_REQUEST_TIMEOUT": "1"
}

# ------------------------------------------------------------------ results


@dataclass(frozen=True)
class Term:
    """One named number in an ordering's arithmetic. value None: not known;
    math.inf: no such limit (an unset timeout)."""

    label: str
    value: float | None
    text: str | None = None  # rendered instead of "label value" (computed terms)
    set_by: str | None = None  # what fixes the value when it is not known

    def render(self) -> str:
        if self.text:
            return self.text
        if self.value is None:
            return (
                f"{self.label} ? (not given: set by {self.set_by})"
                if self.set_by
                else f"{self.label} ?"
            )
        return f"{self.label} {format_number(self.value)}"


@dataclass(frozen=True)
class Check:
    text: str
    status: str  # "pass" | "fail" | "unknown"


@dataclass(frozen=True)
class Ordering:
    key: str  # "A".."J"; "E[deployment]"
    title: str  # the rule, then why it matters
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()
    not_applicable: str | None = None  # why the ordering does not apply to this service

    @property
    def status(self) -> str:
        if self.not_applicable:
            return "n/a"
        found = {c.status for c in self.checks}
        return "fail" if "fail" in found else "unknown" if "unknown" in found else "pass"

    @property
    def holds(self) -> bool:
        return self.status in ("pass", "n/a")


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def format_number(value: float) -> str:
    """A term's value as the checks print it: "none" for no limit."""
    if value == math.inf:
        return "none"
    return f"{round(value, 6):g}"


def _side(terms: list[Term]) -> tuple[str, float | None]:
    known = [t.value for t in terms if t.value is not None]
    total = sum(known) if len(known) == len(terms) else None
    text = " + ".join(t.render() for t in terms)
    if len(terms) > 1 and total is not None:
        text += f" = {format_number(total)}"
    return text, total


def _compare(lhs: list[Term], op: str, rhs: list[Term]) -> Check:
    """One ordering's arithmetic. A limit that is not there ("none") is never
    reached: the ordering holds when its larger side is unbounded, whatever the
    smaller side is, and is violated when only the smaller side is."""
    left_text, left = _side(lhs)
    right_text, right = _side(rhs)
    larger = right if op in ("<", "<=") else left
    if left is None or right is None:
        status = "unknown"
    elif larger == math.inf:
        status = "pass"
    else:
        status = "pass" if _OPS[op](left, right) else "fail"
    return Check(f"{left_text} {op} {right_text} -> {status.upper()}", status)


# ------------------------------------------------------------------ the model


@dataclass(frozen=True)
class Deployment:
    name: str
    ingress: bool
    graceful_shutdown_s: float = RAY_GST_DEFAULT_S
    wait_loop_s: float = RAY_WAIT_LOOP_DEFAULT_S
    # Whether the config file sets graceful_shutdown_timeout_s. An explicit
    # value replaces the deployment's (application_state.py:2050) after the
    # ingress floor was applied at build time, so it is not floored.
    gst_in_config: bool = True

    def force_kill_after_s(self, min_draining_s: float) -> float:
        """Seconds from a replica's stop to the controller's force-kill."""
        if not self.ingress:
            return self.graceful_shutdown_s
        # DeploymentReplica.stop waits max(gst, MIN) (deployment_state.py:2178-2186).
        # Only a gst left to the code is floored at MIN + SHUTDOWN_BUFFER_S
        # (deploy_utils.py:86-100); one set in the config file replaces it.
        floor = min_draining_s if self.gst_in_config else min_draining_s + SHUTDOWN_BUFFER_S
        return max(self.graceful_shutdown_s, floor)

    def force_kill_term(self, min_draining_s: float) -> Term:
        kill = self.force_kill_after_s(min_draining_s)
        if kill == self.graceful_shutdown_s:
            return Term("gst", kill)
        if self.gst_in_config:
            return Term(
                "gst",
                kill,
                f"gst max({format_number(self.graceful_shutdown_s)}, MIN_DRAINING "
                f"{format_number(min_draining_s)}) = {format_number(kill)}",
            )
        return Term(
            "gst",
            kill,
            f"gst max({format_number(self.graceful_shutdown_s)}, MIN_DRAINING "
            f"{format_number(min_draining_s)} + SHUTDOWN_BUFFER_S "
            f"{format_number(SHUTDOWN_BUFFER_S)}) = {format_number(kill)}",
        )


@dataclass(frozen=True)
class Ladder:
    """The spot-notice ladder with ordering E, as the spot scenario runs it.

    None means "not known" for the values only the environment fixes, and "no
    such timeout" for HAProxy's timeouts (Ray renders no directive, or 0)."""

    long_runner_s: float | None = 20.0  # the app's longest request
    long_runner_min_s: float = 8.0  # the shortest long request the scenario's load sends
    client_timeout_s: float | None = None  # how long a client waits for an answer
    request_timeout_s: float | None = 26.0  # http_options.request_timeout_s
    keep_alive_timeout_s: float = RAY_KEEP_ALIVE_DEFAULT_S  # http_options; bounds C's idle window
    haproxy_timeout_server_s: int | None = 28  # RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S
    haproxy_hard_stop_after_s: int | None = 30  # RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S
    # RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S: idle connections of a stale worker
    # close within 2 s of the reload, so a last request on one (26 s at most)
    # ends before the hard stop (C).
    haproxy_close_spread_s: int | None = 2
    # RAY_SERVE_ENABLE_HAPROXY_OPTIMIZED_CONFIG (on by default), which renders
    # `option idle-close-on-response`: a soft-stopped worker keeps an idle
    # keep-alive connection for one last request instead of closing it (C).
    haproxy_idle_close_on_response: bool = True
    # RAY_SERVE_HAPROXY_CLOSE_AFTER_CHUNKED_RESPONSE (patch 0007, off by
    # default): a stream running at a reload leaves no reusable connection, so
    # the client's next request cannot follow it into the stale worker (C).
    haproxy_close_after_chunked_response: bool = True
    haproxy_timeout_connect_s: int | None = RAY_TIMEOUT_CONNECT_DEFAULT_S
    # RAY_SERVE_HAPROXY_TIMEOUT_CLIENT_S (C: without close-spread-time, an
    # unused connection stays on a stale worker until it or the hard stop).
    haproxy_timeout_client_s: int | None = RAY_TIMEOUT_CLIENT_DEFAULT_S
    haproxy_retries: int | None = None  # None: HAProxy's default
    min_draining_s: float = 30.0  # RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S
    proxy_min_draining_s: float = 30.0  # RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S
    port_quarantine_s: float | None = None  # None: Ray's default, hard-stop-after + 30
    sigterm_drain_timeout_s: float = RAY_SIGTERM_DRAIN_DEFAULT_S
    # Ordering E (missing from the ladder as proposed): a request admitted at the
    # end of the drain window must finish before the force-kill: MIN + timeout +
    # loop + margin.
    deployments: tuple[Deployment, ...] = (Deployment("ingress", True, 59.0, 2.0),)
    margin_s: float = 1.0  # the slack orderings E, F, H and I leave
    notice_s: float | None = 120.0
    detection_s: float | None = 10.0
    drain_deadline_s: float | None = 60.0  # DrainNode(PREEMPTION, deadline = call + this)
    sigterm_grace_s: float | None = None  # set: the drain action is a SIGTERM instead
    lb_deregistration_s: float | None = None
    # Where each input came from, as (input, value, source) rows; display only.
    inputs: tuple[tuple[str, str, str], ...] = field(default=(), compare=False, repr=False)

    # -------------------------------------------------- what the scenarios use

    @property
    def notice(self) -> SpotNotice:
        """The spot notice the scenarios play out; a ladder that leaves any of
        its times to the environment has none to play."""
        if self.notice_s is None or self.detection_s is None or self.drain_deadline_s is None:
            raise HarnessError(
                "the ladder does not give the whole spot notice (notice_s, detection_s, "
                "drain_deadline_s), so no preemption can be played out from it"
            )
        return SpotNotice(self.notice_s, self.detection_s, self.drain_deadline_s)

    @property
    def known_request_timeout_s(self) -> float:
        """request_timeout_s, for a run whose clients must outwait it."""
        return _known(self.request_timeout_s, "request_timeout_s")

    @property
    def known_long_runner_s(self) -> float:
        """long_runner_s, for a run whose load sends long requests up to it."""
        return _known(self.long_runner_s, "long_runner_s")

    def scaled(self, factor: float) -> Ladder:
        if factor <= 0:
            raise HarnessError(f"ladder scale factor must be positive, got {factor}")

        def times(value):
            return None if value is None else value * factor

        changes = {
            name: times(getattr(self, name))
            for name in (
                "long_runner_s",
                "long_runner_min_s",
                "client_timeout_s",
                "request_timeout_s",
                "min_draining_s",
                "proxy_min_draining_s",
                "margin_s",
                "notice_s",
                "detection_s",
                "drain_deadline_s",
                "sigterm_grace_s",
                "lb_deregistration_s",
            )
        }
        # HAProxy's knobs are integers in Ray; round each the safe way.
        if self.haproxy_timeout_server_s is not None:
            changes["haproxy_timeout_server_s"] = math.ceil(self.haproxy_timeout_server_s * factor)
        if self.haproxy_hard_stop_after_s is not None:
            # 0 would render `hard-stop-after 0s`, which is no hard stop at all.
            changes["haproxy_hard_stop_after_s"] = (
                math.floor(self.haproxy_hard_stop_after_s * factor) or None
            )
        if self.haproxy_close_spread_s is not None:
            changes["haproxy_close_spread_s"] = math.floor(self.haproxy_close_spread_s * factor)
        changes["deployments"] = tuple(
            replace(
                d,
                graceful_shutdown_s=d.graceful_shutdown_s * factor,
                wait_loop_s=d.wait_loop_s * factor,
            )
            for d in self.deployments
        )
        # Not scaled: Ray's defaults that node_env() leaves alone (timeout connect,
        # the port quarantine, the SIGTERM drain timeout, keep-alive).
        ladder = replace(self, inputs=(), **changes)
        broken = [o for o in ladder.orderings() if o.status == "fail"]
        if broken:
            raise HarnessError(
                f"scaling the ladder by {factor} breaks "
                + "; ".join(
                    f"{o.key} {o.title.split(':')[0]}: "
                    + ", ".join(c.text for c in o.checks if c.status == "fail")
                    for o in broken
                )
            )
        return ladder

    def node_env(self) -> dict[str, str]:
        env = {}
        if self.haproxy_timeout_server_s is not None:
            env["RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S"] = str(self.haproxy_timeout_server_s)
        env.update(
            {
                "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": str(self.haproxy_hard_stop_after_s or 0),
                "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": _env_num(self.min_draining_s),
                "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": _env_num(self.proxy_min_draining_s),
                # Patch 0004 sizes an ingress replica's force-kill budget as MIN + request
                # timeout + wait loop + this buffer; set to the ladder's margin, that is
                # ordering E's right-hand side, so the patched budget is exactly the gst
                # the ladder gives. Stock Ray has the buffer hard-coded and ignores it.
                "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_BUFFER_S": _env_num(self.margin_s),
                **FORCE_KILL_COVERS_REQUEST_TIMEOUT,
            }
        )
        # The rest only when they differ from Ray's defaults, so a default ladder
        # starts nodes with the env the scenarios have always used.
        if self.haproxy_close_spread_s is not None:
            env["RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S"] = str(self.haproxy_close_spread_s)
        if self.haproxy_close_after_chunked_response:
            # Stock Ray ignores it.
            env["RAY_SERVE_HAPROXY_CLOSE_AFTER_CHUNKED_RESPONSE"] = "1"
        if self.haproxy_timeout_connect_s != RAY_TIMEOUT_CONNECT_DEFAULT_S:
            env["RAY_SERVE_HAPROXY_TIMEOUT_CONNECT_S"] = str(self.haproxy_timeout_connect_s or 0)
        if self.haproxy_retries is not None:
            env["RAY_SERVE_HAPROXY_RETRIES"] = str(self.haproxy_retries)
        if self.port_quarantine_s is not None:
            env["RAY_SERVE_PORT_QUARANTINE_S"] = _env_num(self.port_quarantine_s)
        if self.sigterm_drain_timeout_s != RAY_SIGTERM_DRAIN_DEFAULT_S:
            env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = _env_num(self.sigterm_drain_timeout_s)
        return env

    def deployment_options(self) -> dict:
        """Options of the (first) ingress deployment, the one the scenarios deploy."""
        d = next(d for d in self.deployments if d.ingress)
        return {
            "graceful_shutdown_timeout_s": d.graceful_shutdown_s,
            "graceful_shutdown_wait_loop_s": d.wait_loop_s,
        }

    def http_options(self) -> dict:
        if self.request_timeout_s is None:
            return {}
        return {"request_timeout_s": self.request_timeout_s}

    # -------------------------------------------------- the orderings

    def orderings(self) -> list[Ordering]:
        """Orderings A-J (docs/architecture.md), E once per deployment."""
        return [
            self._a(),
            self._b(),
            self._c(),
            self._d(),
            *self._e(),
            self._f(),
            self._g(),
            self._h(),
            self._i(),
            self._j(),
        ]

    def _t(self, name: str, label: str) -> Term:
        return Term(label, getattr(self, name), set_by=SET_BY.get(name))

    def _limit(self, value: float | None, label: str) -> Term:
        """A timeout where None means there is none."""
        return Term(label, math.inf if value is None else value)

    def _haproxy_limit(self, value: float | None, label: str) -> Term:
        """An HAProxy timeout: Ray renders 0 as `... 0s`, which HAProxy reads as none."""
        return self._limit(value if value else None, label)

    def _margin(self) -> Term:
        return Term("margin", self.margin_s)

    def _request_bound(self) -> tuple[Term, tuple[str, ...]]:
        """How long an admitted request can run: request_timeout_s, or with none
        set, whatever the app's longest request is."""
        if self.request_timeout_s is not None:
            return Term("request_timeout_s", self.request_timeout_s), ()
        return (
            self._t("long_runner_s", "long-runner"),
            (
                "request_timeout_s is unset, so only the app's own longest request bounds "
                "a request here; nothing stops a longer one",
            ),
        )

    def _deadline(self) -> Term:
        """The drain deadline, from the drain call: the DrainNode deadline, or on
        the SIGTERM path the deadline Ray sets itself (_private/node.py:679-705)."""
        if self.sigterm_grace_s is not None:
            return Term(
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", max(self.sigterm_drain_timeout_s, 0.0)
            )
        return self._t("drain_deadline_s", "drain deadline")

    def _longest_kill(self) -> tuple[Deployment, Term] | None:
        """The deployment whose replicas the controller waits for longest."""
        if not self.deployments:
            return None
        d = max(self.deployments, key=lambda d: d.force_kill_after_s(self.min_draining_s))
        return d, d.force_kill_term(self.min_draining_s)

    def _a(self) -> Ordering:
        title = "long-runner < request_timeout_s: legitimate requests never get a 408"
        if self.request_timeout_s is None:
            return Ordering(
                "A",
                title,
                (
                    Check(
                        "request_timeout_s unset (Ray 2.60.0 default None, "
                        "ray/serve/config.py:883): nothing bounds a request, so the ladder has no "
                        "top rung -> FAIL",
                        "fail",
                    ),
                ),
            )
        check = _compare(
            [self._t("long_runner_s", "long-runner")],
            "<",
            [Term("request_timeout_s", self.request_timeout_s)],
        )
        return Ordering("A", title, (check,))

    def _b(self) -> Ordering:
        request_timeout = self._limit(self.request_timeout_s, "request_timeout_s")
        check = _compare(
            [request_timeout],
            "<",
            [self._haproxy_limit(self.haproxy_timeout_server_s, "timeout server")],
        )
        notes: list[str] = []
        if not self.haproxy_timeout_server_s:
            # Nothing competes with the replica's 408 then, so B holds; what the
            # missing rung costs is C's (a hard stop cuts what no timeout ends).
            notes.append(
                "no HAProxy `timeout server` (RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S unset "
                "or 0): nothing on HAProxy's side gives up on a hung replica, which "
                "holds its connection until it dies or a hard stop cuts it (C)"
            )
        return Ordering(
            "B",
            "request_timeout_s < timeout server: the replica's clean 408 reaches the client "
            "before HAProxy's 504 (sent as a 500); holds for non-streaming responses only",
            (check,),
            tuple(notes),
        )

    def _idle_window(self) -> Term | None:
        """How long after a reload a stale worker still admits a request on a
        connection that was idle at the reload: close-spread-time, which closes
        them all within its window (or sooner, by the timeouts below). A
        connection that has not sent a request yet stays until `timeout client`
        or the hard stop (with or without `option idle-close-on-response`); one
        that has, with that option or close-spread-time, until the keep-alive
        timeout or the hard stop (with neither, the soft stop closes it). None
        with no hard stop: nothing cuts that request."""
        hard_stop_s = self.haproxy_hard_stop_after_s
        if not hard_stop_s:
            return None
        spread_s = self.haproxy_close_spread_s  # 0 is HAProxy's "not set"
        client = (self.haproxy_timeout_client_s or math.inf, "timeout client")
        # An unused connection: `timeout client` or the hard stop.
        window_s, until = min((hard_stop_s, "hard-stop-after"), client)
        # A used one: closed at the soft stop, unless `option
        # idle-close-on-response` keeps it or close-spread-time spreads the
        # closes; then the keep-alive timeout (0 is not set: `timeout client`)
        # or the hard stop.
        if self.haproxy_idle_close_on_response or spread_s:
            keep_alive = (
                (self.keep_alive_timeout_s, "keep-alive timeout")
                if self.keep_alive_timeout_s
                else client
            )
            used = min(keep_alive, (hard_stop_s, "hard-stop-after"))
            window_s, until = max((window_s, until), used)
        if spread_s and spread_s < window_s:
            # close-spread-time closes them all within its window, unless the
            # timeouts above do sooner.
            return Term("close-spread-time", spread_s)
        return Term(
            "close-spread-time",
            window_s,
            text=("" if spread_s else "close-spread-time unset ")
            + f"(idle connections kept until {until} {format_number(window_s)})",
        )

    def _c(self) -> Ordering:
        hard_stop = self._haproxy_limit(self.haproxy_hard_stop_after_s, "hard-stop-after")
        # A request in flight at the reload ends at request_timeout_s (the
        # replica ends streams too); `timeout server` bounds only the gaps
        # between a response's bytes, so it ends no stream that keeps sending.
        checks = [
            _compare(
                [self._limit(self.request_timeout_s, "request_timeout_s")],
                "<",
                [hard_stop],
            )
        ]
        notes: list[str] = []
        idle = self._idle_window()
        if idle is not None:
            # C's idle-connection form: the last request a stale worker admits
            # on a connection that was idle at the reload comes within this
            # window of it.
            checks.append(
                _compare(
                    [idle, self._limit(self.request_timeout_s, "request_timeout_s")],
                    "<",
                    [hard_stop],
                )
            )
        return Ordering(
            "C",
            "request_timeout_s < hard-stop-after: a request on a soft-stopped "
            "worker ends by its timeout, not a cut connection",
            tuple(checks),
            tuple(notes),
        )

    def _d(self) -> Ordering:
        hard_stop = self.haproxy_hard_stop_after_s
        if self.port_quarantine_s is None:
            # serve/_private/constants.py:1072-1075: the default follows hard-stop-after.
            quarantine = float((hard_stop or 0) + 30)
            q_term = Term(
                "port quarantine",
                quarantine,
                f"port quarantine (hard-stop-after + 30) {format_number(quarantine)}",
            )
        else:
            q_term = Term("port quarantine", self.port_quarantine_s)
        return Ordering(
            "D",
            "hard-stop-after <= MIN_DRAINING: no stale worker routes to a replica after it "
            "stops being reachable; a freed port stays out of use while one can",
            (
                _compare(
                    [self._haproxy_limit(hard_stop, "hard-stop-after")],
                    "<=",
                    [Term("MIN_DRAINING", self.min_draining_s)],
                ),
                _compare([q_term], ">", [self._haproxy_limit(hard_stop, "hard-stop-after")]),
            ),
        )

    def _e(self) -> list[Ordering]:
        bound, bound_notes = self._request_bound()
        result = []
        for d in self.deployments:
            kill = d.force_kill_term(self.min_draining_s)
            if d.ingress:
                title = (
                    "gst >= MIN_DRAINING + request_timeout_s + wait_loop + margin: a request "
                    "admitted at the end of the drain window finishes before the force-kill"
                )
                need = [
                    Term("MIN_DRAINING", self.min_draining_s),
                    bound,
                    Term("wait_loop", d.wait_loop_s),
                    self._margin(),
                ]
            else:
                title = (
                    "gst >= request_timeout_s + wait_loop + margin (not ingress, no drain "
                    "window): a request routed just before the stop finishes before the "
                    "force-kill"
                )
                need = [bound, Term("wait_loop", d.wait_loop_s), self._margin()]
            check = _compare([kill], ">=", need)
            notes = list(bound_notes)
            if check.status == "fail" and d.ingress and kill.text:
                left = d.force_kill_after_s(self.min_draining_s) - self.min_draining_s
                notes.append(
                    f"a request admitted at the end of the drain window gets "
                    f"{format_number(left)} s before the force-kill"
                    + (
                        ""
                        if d.gst_in_config
                        else "; SHUTDOWN_BUFFER_S is hard-coded in 2.60.0 "
                        "(ray/serve/_private/constants.py:1086)"
                    )
                )
                if d.gst_in_config:
                    notes.append(
                        "a gst set in the config file is not floored at MIN_DRAINING "
                        "+ SHUTDOWN_BUFFER_S (application_state.py:2050); only one "
                        "left to the code is (deploy_utils.py:86-100)"
                    )
            needed = _side(need)[1]
            # A failed check had both sides known.
            if check.status == "fail" and needed is not None:
                notes.append(f"set graceful_shutdown_timeout_s >= {format_number(needed)}")
            result.append(Ordering(f"E[{d.name}]", title, (check,), tuple(notes)))
        return result

    def _f(self) -> Ordering:
        title = (
            "drain deadline >= gst + margin: the controller sees the drain in time to stop "
            "every replica gracefully before the deadline"
        )
        longest = self._longest_kill()
        if longest is None:
            return Ordering("F", title, (Check("no deployments given -> UNKNOWN", "unknown"),))
        d, kill = longest
        deadline = self._deadline()
        check = _compare(
            [deadline],
            ">=",
            [
                replace(kill, label=f"gst ({d.name})", text=f"{kill.render()} ({d.name})"),
                self._margin(),
            ],
        )
        notes = []
        if deadline.value is not None and check.status == "pass":
            slack = deadline.value - d.force_kill_after_s(self.min_draining_s) - self.margin_s
            notes.append(
                f"a replacement has {format_number(slack)} s to become RUNNING before the "
                f"forced stop (deadline - gst - margin); slower means a capacity dip"
            )
        return Ordering("F", title, (check,), tuple(notes))

    def _g(self) -> Ordering:
        deadline = self._deadline()
        checks = [
            _compare(
                [Term("PROXY_MIN_DRAINING", self.proxy_min_draining_s)],
                ">=",
                [self._t("lb_deregistration_s", "LB deregistration")],
            ),
            _compare(
                [
                    Term("PROXY_MIN_DRAINING", self.proxy_min_draining_s),
                    Term("PROXY_DRAIN_CHECK_PERIOD_S", PROXY_DRAIN_CHECK_PERIOD_S),
                ],
                "<",
                [deadline],
            ),
        ]
        notes = []
        ingress = [d.force_kill_after_s(self.min_draining_s) for d in self.deployments if d.ingress]
        if ingress:
            # Only ingress replicas are HAProxy targets, and each is stopped by
            # deadline - gst at the latest; the shortest gst stops last.
            gst = min(ingress)
            if deadline.value is None:
                reload = Term("last reload", None, "last reload ? (needs the drain deadline)")
            else:
                at = max(0.0, deadline.value - gst)
                reload = Term(
                    "last reload",
                    at,
                    f"last reload max(0, deadline "
                    f"{format_number(deadline.value)} - gst {format_number(gst)}) = "
                    f"{format_number(at)}",
                )
            checks.append(
                _compare(
                    [reload, self._limit(self.haproxy_hard_stop_after_s, "hard-stop-after")],
                    "<",
                    [deadline],
                )
            )
            latest = (
                None
                if deadline.value is None or not self.haproxy_hard_stop_after_s
                else deadline.value - self.haproxy_hard_stop_after_s
            )
            if latest is not None and latest > 0 and checks[-1].status == "pass":
                notes.append(
                    f"a later reload on the node (a replica elsewhere starting or "
                    f"stopping) must still come before deadline - hard-stop-after = "
                    f"{format_number(latest)} s, or "
                    f"the proxy never reaches DRAINED and the node is killed, not drained"
                )
        return Ordering(
            "G",
            "the node's HAProxy drains before the deadline: the external LB "
            "deregisters it within PROXY_MIN_DRAINING, and its drain check and "
            "old workers end before the deadline",
            tuple(checks),
            tuple(notes),
        )

    def _h(self) -> Ordering:
        return Ordering(
            "H",
            "detection + drain deadline + margin <= notice: the node is not killed before "
            "its drain deadline",
            (
                _compare(
                    [self._t("detection_s", "detection"), self._deadline(), self._margin()],
                    "<=",
                    [self._t("notice_s", "notice")],
                ),
            ),
        )

    def _i(self) -> Ordering:
        title = (
            "SIGTERM path: RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S >= gst + margin, and the "
            "orchestrator's grace >= that + margin"
        )
        longest = self._longest_kill()
        drain_s = max(self.sigterm_drain_timeout_s, 0)
        drain = Term("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", drain_s)
        if self.sigterm_grace_s is None:
            if self.drain_deadline_s is None:
                return Ordering(
                    "I",
                    title,
                    (
                        Check(
                            f"drain action not given: set by {SET_BY['drain_deadline_s']} "
                            "-> UNKNOWN",
                            "unknown",
                        ),
                    ),
                )
            notes = []
            if (
                longest
                and drain_s < longest[0].force_kill_after_s(self.min_draining_s) + self.margin_s
            ):
                notes.append(
                    f"if a node is ever stopped by SIGTERM instead (docker stop, pod "
                    f"deletion), Ray drains it for only {format_number(drain_s)} s < "
                    f"{longest[1].render()} + margin {format_number(self.margin_s)}"
                )
            return Ordering(
                "I",
                title,
                notes=tuple(notes),
                not_applicable=(
                    "the drain action is a DrainNode with a deadline; "
                    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S acts only on SIGTERM"
                ),
            )
        checks = []
        if longest:
            checks.append(_compare([drain], ">=", [longest[1], self._margin()]))
        checks.append(
            _compare([Term("SIGTERM grace", self.sigterm_grace_s)], ">=", [drain, self._margin()])
        )
        notes = []
        if self.sigterm_drain_timeout_s <= 0:
            notes.append(
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S <= 0 turns the SIGTERM drain off: "
                "the node is torn down at once"
            )
        return Ordering("I", title, tuple(checks), tuple(notes))

    def _j(self) -> Ordering:
        connect = self.haproxy_timeout_connect_s or math.inf  # 0 renders "timeout connect 0s": none
        retries = HAPROXY_DEFAULT_RETRIES if self.haproxy_retries is None else self.haproxy_retries
        retries_text = (
            f"retries {retries} (HAProxy default; RAY_SERVE_HAPROXY_RETRIES unset)"
            if self.haproxy_retries is None
            else f"retries {retries}"
        )
        total = connect * (retries + 1)
        tries = Term(
            "connect attempts",
            total,
            f"timeout connect {format_number(connect)} x ({retries_text} + 1) = "
            f"{format_number(total)}",
        )
        return Ordering(
            "J",
            "unannounced loss: timeout connect x (retries + 1) <= the client's timeout: "
            "HAProxy gives up on a black-holed node before the client does",
            (_compare([tries], "<=", [self._t("client_timeout_s", "client timeout")]),),
            (
                "health checks, then GCS death detection and replacement, bound how long a dead "
                "node keeps getting traffic; not checked here",
            ),
        )


def _known(value: float | None, name: str) -> float:
    # The scenarios run the default ladder, which gives every value; a
    # description's may leave some to the environment.
    if value is None:
        raise HarnessError(f"the ladder does not give {name}, which this run needs")
    return value


def _env_num(value: float) -> str:
    """A number as an env var Ray parses with float(): exact, no exponent for ladder values."""
    return str(int(value)) if value == int(value) else repr(value)
