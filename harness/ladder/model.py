"""The timeout ladder (node retirement inside a spot notice): one model of its
knobs, the orderings A-J checked on it (docs/architecture.md, "The timeout
ladder", says what each protects), the one factor that scales it down for
short test runs, and the YAML service description that `python -m harness
ladder check FILE` reads.

Scaling multiplies every time the service sets by one factor, so every ordering
between them holds at any scale. Two of Ray's values do not scale because they are
constants in 2.60.0 (SHUTDOWN_BUFFER_S = 5, PROXY_DRAIN_CHECK_PERIOD_S = 5);
`orderings()` checks the scaled ladder against them too, so a factor that would
break an ordering is refused rather than silently run.

An ordering is "unknown", never "pass", when it needs a value that only the
environment fixes (the app's longest request, the external load balancer, the
clients, the spot notice) and the description does not give it.

Ray 2.60.0 defaults below were read in the stock wheel
(build/wheelhouse/ray-2.60.0/ray-2.60.0-*.whl), not in .venv, which may carry this
project's patches; paths in comments are relative to the wheel's `ray/`.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.core.errors import HarnessError
from harness.ladder.notice import SpotNotice

# serve/_private/constants.py:1086. A constant, not an env var: it is the whole
# budget a request admitted at the end of the drain window gets under the floor.
SHUTDOWN_BUFFER_S = 5.0
# serve/_private/constants.py:325; proxy_state.py:608 re-checks a draining proxy this often.
PROXY_DRAIN_CHECK_PERIOD_S = 5.0
# HAProxy 2.8's `retries` default. Ray renders no `retries` line while
# RAY_SERVE_HAPROXY_RETRIES is unset (serve/_private/haproxy_templates.py:115-117).
HAPROXY_DEFAULT_RETRIES = 3

# Ray 2.60.0 defaults of the values this module models.
# DeploymentConfig takes both from constants (serve/_private/config.py:199-206).
RAY_GST_DEFAULT_S = 20.0  # serve/_private/constants.py:270
RAY_WAIT_LOOP_DEFAULT_S = 2.0  # serve/_private/constants.py:271
RAY_HARD_STOP_AFTER_DEFAULT_S = 120  # serve/_private/constants.py:803-805
RAY_TIMEOUT_CONNECT_DEFAULT_S = 5  # serve/_private/constants.py:880-882
RAY_MIN_DRAINING_DEFAULT_S = 30.0  # serve/_private/constants.py:1080-1082
RAY_PROXY_MIN_DRAINING_DEFAULT_S = 30.0  # serve/_private/constants.py:320-322
RAY_SIGTERM_DRAIN_DEFAULT_S = 30.0  # _private/ray_constants.py:41-43 (used in _private/node.py:679)
RAY_KEEP_ALIVE_DEFAULT_S = 90  # serve/config.py:884 = serve/_private/constants.py:60

# What fixes a value the description may leave out, when Ray does not.
SET_BY = {
    "long_runner_s": "the application (its longest request)",
    "client_timeout_s": "the clients, or the external LB's idle timeout",
    "notice_s": "the cloud (AWS: 120 s)",
    "detection_s": "the node agent (spot-notice poll + its loop)",
    "drain_deadline_s": "the drain action (spot.drain_deadline or spot.sigterm_grace)",
    "lb_deregistration_s": "the external load balancer: health-check interval x unhealthy "
    "threshold + deregistration delay",
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
        return f"{self.label} {_num(self.value)}"


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


def _num(value: float) -> str:
    if value == math.inf:
        return "none"
    return f"{round(value, 6):g}"


def _side(terms: list[Term]) -> tuple[str, float | None]:
    values = [t.value for t in terms]
    total = None if None in values else sum(values)
    text = " + ".join(t.render() for t in terms)
    if len(terms) > 1 and total is not None:
        text += f" = {_num(total)}"
    return text, total


def _compare(lhs: list[Term], op: str, rhs: list[Term]) -> Check:
    left_text, left = _side(lhs)
    right_text, right = _side(rhs)
    if left is None or right is None:
        status = "unknown"
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
                f"gst max({_num(self.graceful_shutdown_s)}, MIN_DRAINING "
                f"{_num(min_draining_s)}) = {_num(kill)}",
            )
        return Term(
            "gst",
            kill,
            f"gst max({_num(self.graceful_shutdown_s)}, MIN_DRAINING "
            f"{_num(min_draining_s)} + SHUTDOWN_BUFFER_S "
            f"{_num(SHUTDOWN_BUFFER_S)}) = {_num(kill)}",
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
    haproxy_timeout_connect_s: int | None = RAY_TIMEOUT_CONNECT_DEFAULT_S
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
        return SpotNotice(self.notice_s, self.detection_s, self.drain_deadline_s)

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
                # Patch 0003 sizes an ingress replica's force-kill budget as MIN + request
                # timeout + wait loop + this buffer; set to the ladder's margin, that is
                # ordering E's right-hand side, so the patched budget is exactly the gst
                # the ladder gives. Stock Ray has the buffer hard-coded and ignores it.
                "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_BUFFER_S": _env_num(self.margin_s),
            }
        )
        # The rest only when they differ from Ray's defaults, so a default ladder
        # starts nodes with the env the scenarios have always used.
        if self.haproxy_close_spread_s is not None:
            env["RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S"] = str(self.haproxy_close_spread_s)
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
            [request_timeout], "<", [self._limit(self.haproxy_timeout_server_s, "timeout server")]
        )
        notes = []
        if self.haproxy_timeout_server_s is None:
            # 26 < infinity, but the ladder needs the rung: without it nothing on
            # HAProxy's side ever gives up on a replica.
            check = Check(f"{request_timeout.render()} < timeout server none -> FAIL", "fail")
            notes.append(
                "no HAProxy `timeout server` (RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S unset "
                "or 0): a hung replica holds its HAProxy connection until it dies"
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
        keep-alive connection that was idle at the reload: close-spread-time,
        or unset, the hard stop itself (Serve renders `option
        idle-close-on-response`, which keeps such a connection for one last
        request); never longer than the keep-alive timeout. None with no hard
        stop: nothing cuts that request."""
        if not self.haproxy_hard_stop_after_s:
            return None
        if self.haproxy_close_spread_s is not None:
            window = Term("close-spread-time", self.haproxy_close_spread_s)
        else:
            window = Term(
                "close-spread-time",
                self.haproxy_hard_stop_after_s,
                text=f"close-spread-time unset (idle connections kept until "
                f"hard-stop-after {_num(self.haproxy_hard_stop_after_s)})",
            )
        if self.keep_alive_timeout_s < window.value:
            return Term("keep-alive timeout", self.keep_alive_timeout_s)
        return window

    def _c(self) -> Ordering:
        hard_stop = self._limit(self.haproxy_hard_stop_after_s, "hard-stop-after")
        checks = [
            _compare(
                [self._limit(self.haproxy_timeout_server_s, "timeout server")], "<", [hard_stop]
            )
        ]
        notes = []
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
            "timeout server < hard-stop-after: a request on a soft-stopped "
            "worker ends by a timeout, not a cut connection",
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
                f"port quarantine (hard-stop-after + 30) {_num(quarantine)}",
            )
        else:
            q_term = Term("port quarantine", self.port_quarantine_s)
        return Ordering(
            "D",
            "hard-stop-after <= MIN_DRAINING: no stale worker routes to a replica after it "
            "stops being reachable; a freed port stays out of use while one can",
            (
                _compare(
                    [self._limit(hard_stop, "hard-stop-after")],
                    "<=",
                    [Term("MIN_DRAINING", self.min_draining_s)],
                ),
                _compare([q_term], ">", [self._limit(hard_stop, "hard-stop-after")]),
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
                left = kill.value - self.min_draining_s
                notes.append(
                    f"a request admitted at the end of the drain window gets "
                    f"{_num(left)} s before the force-kill"
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
            if check.status == "fail":
                notes.append(f"set graceful_shutdown_timeout_s >= {_num(_side(need)[1])}")
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
            slack = deadline.value - kill.value - self.margin_s
            notes.append(
                f"a replacement has {_num(slack)} s to become RUNNING before the "
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
                    f"{_num(deadline.value)} - gst {_num(gst)}) = "
                    f"{_num(at)}",
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
                    f"{_num(latest)} s, or "
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
        drain = Term("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", max(self.sigterm_drain_timeout_s, 0))
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
                and drain.value < longest[0].force_kill_after_s(self.min_draining_s) + self.margin_s
            ):
                notes.append(
                    f"if a node is ever stopped by SIGTERM instead (docker stop, pod "
                    f"deletion), Ray drains it for only {_num(drain.value)} s < "
                    f"{longest[1].render()} + margin {_num(self.margin_s)}"
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
        notes = ()
        if self.sigterm_drain_timeout_s <= 0:
            notes = (
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S <= 0 turns the SIGTERM drain off: "
                "the node is torn down at once",
            )
        return Ordering("I", title, tuple(checks), notes)

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
            f"timeout connect {_num(connect)} x ({retries_text} + 1) = {_num(total)}",
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


def _env_num(value: float) -> str:
    """A number as an env var Ray parses with float(): exact, no exponent for ladder values."""
    return str(int(value)) if value == int(value) else repr(value)


# ------------------------------------------------------------------ the YAML description


@dataclass(frozen=True)
class _EnvKnob:
    field: str | None  # the Ladder field it sets; None: checked, not modelled
    parse: str  # how Ray 2.60.0 parses it
    default: object
    where: str  # the default's file:line in the 2.60.0 wheel


ENV_KNOBS = {
    "RAY_SERVE_ENABLE_HA_PROXY": _EnvKnob(None, "flag", "0", "ray/serve/_private/constants.py:752"),
    # HAProxy mode forces direct ingress on whatever this says (constants.py:1126-1128).
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": _EnvKnob(
        None, "any", "0", "ray/serve/_private/constants.py:747-749"
    ),
    "RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S": _EnvKnob(
        "haproxy_timeout_server_s", "int-or-empty", None, "ray/serve/_private/constants.py:864-869"
    ),
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": _EnvKnob(
        "haproxy_hard_stop_after_s",
        "int",
        RAY_HARD_STOP_AFTER_DEFAULT_S,
        "ray/serve/_private/constants.py:803-805",
    ),
    "RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S": _EnvKnob(
        "haproxy_close_spread_s", "int", None, "ray/serve/_private/constants.py:816-818"
    ),
    "RAY_SERVE_HAPROXY_TIMEOUT_CONNECT_S": _EnvKnob(
        "haproxy_timeout_connect_s",
        "int>=0",
        RAY_TIMEOUT_CONNECT_DEFAULT_S,
        "ray/serve/_private/constants.py:880-882",
    ),
    "RAY_SERVE_HAPROXY_RETRIES": _EnvKnob(
        "haproxy_retries", "int>=0", None, "ray/serve/_private/constants.py:965"
    ),
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": _EnvKnob(
        "min_draining_s",
        "float",
        RAY_MIN_DRAINING_DEFAULT_S,
        "ray/serve/_private/constants.py:1080-1082",
    ),
    "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": _EnvKnob(
        "proxy_min_draining_s",
        "float>0",
        RAY_PROXY_MIN_DRAINING_DEFAULT_S,
        "ray/serve/_private/constants.py:320-322",
    ),
    "RAY_SERVE_PORT_QUARANTINE_S": _EnvKnob(
        "port_quarantine_s", "float>=0", None, "ray/serve/_private/constants.py:1072-1075"
    ),
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": _EnvKnob(
        "sigterm_drain_timeout_s",
        "core-float",
        RAY_SIGTERM_DRAIN_DEFAULT_S,
        "ray/_private/ray_constants.py:41-43",
    ),
}

_TOP = ("node_env", "http_options", "deployments", "app", "spot", "load_balancer", "margin")
_HTTP = ("request_timeout_s", "keep_alive_timeout_s")
_DEPLOYMENT = ("ingress", "graceful_shutdown_timeout_s", "graceful_shutdown_wait_loop_s")
_APP = ("longest_request", "client_timeout")
_SPOT = ("notice", "detection", "drain_deadline", "sigterm_grace")
_LB = ("deregistration",)

_UNITS = {
    "ms": 0.001,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "hours": 3600,
}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")


def parse_duration(value: object) -> float:
    """Seconds from a number (seconds) or a string such as "500ms", "120s", "2m",
    "1.5 min". Raises ValueError with the reason."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip().lower())
        unit = match.group(2) or "s" if match else None
        if unit not in _UNITS:
            raise ValueError(
                f"{value!r} is not a duration: use seconds (120) or a number "
                f"with a unit (500ms, 120s, 2m, 1.5 min, 1h)"
            )
        return float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{value!r} is not a duration: it must be a finite number >= 0")
    return float(value)


class _Doc:
    """A composed YAML tree, read with the file name so every error names its line."""

    def __init__(self, path: Path, text: str) -> None:
        import yaml  # Ray brings PyYAML; requirements.txt pins it for this import

        self.yaml, self.path = yaml, path
        try:
            self.loader = yaml.SafeLoader(text)
        except yaml.reader.ReaderError as exc:
            # The reader refuses control characters (a binary file) before parsing.
            line = text.count("\n", 0, exc.position) + 1
            char = exc.character  # a code point for text input, a byte for bytes
            shown = f"U+{char:04X}" if isinstance(char, int) else repr(char)
            raise HarnessError(
                f"{path}:{line}: not YAML text: character {shown} is not "
                f"allowed in YAML (is it a binary file?); give a YAML "
                f"service description like those in examples/ladder/. "
                f"Nothing was checked."
            ) from None
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            # The problem is often only seen at the end of the file; the context
            # (an unclosed bracket, say) names the line to look at.
            context = (
                f" ({exc.context} on line {exc.context_mark.line + 1})"
                if exc.context and exc.context_mark
                else ""
            )
            raise HarnessError(
                f"{path}:{mark.line + 1}: not valid YAML: {exc.problem}"
                f"{context}; nothing was checked"
            ) from None
        except yaml.YAMLError as exc:
            raise HarnessError(f"{path}: not valid YAML: {exc}; nothing was checked") from None
        finally:
            self.loader.dispose()
        if self.root is None:
            raise HarnessError(f"{path}: the file is empty; see examples/ladder/ for the format")

    def error(self, node, message: str) -> HarnessError:
        return HarnessError(f"{self.path}:{node.start_mark.line + 1}: {message}")

    def line(self, node) -> str:
        return f"line {node.start_mark.line + 1}"

    def scalar(self, node):
        if not isinstance(node, self.yaml.ScalarNode):
            raise self.error(node, "expected a single value here, not a list or a mapping")
        return self.loader.construct_object(node)

    def mapping(self, node, where: str, known: tuple[str, ...] | None) -> dict:
        """{key: (key node, value node)}; unknown and repeated keys are errors. YAML
        merge keys (`<<: *anchor`) work, so node groups can share one env."""
        if not isinstance(node, self.yaml.MappingNode):
            raise self.error(node, f"{where} must be a mapping of keys to values")
        merged, own = {}, {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                parts = (
                    value_node.value
                    if isinstance(value_node, self.yaml.SequenceNode)
                    else [value_node]
                )
                for part in reversed(parts):  # earlier merges win, as YAML says
                    merged.update(self.mapping(part, where, known))
                continue
            key = self.scalar(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in own:
                raise self.error(
                    key_node, f"{where}: {key} is given twice (first on {self.line(own[key][0])})"
                )
            if known is not None and key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise self.error(
                    key_node, f"{where}: unknown key {key!r}; {hint}known here: {', '.join(known)}"
                )
            own[key] = (key_node, value_node)
        return {**merged, **own}

    def duration(self, node, where: str) -> float:
        try:
            return parse_duration(self.scalar(node))
        except ValueError as exc:
            raise self.error(node, f"{where}: {exc}") from None


def _parse_env(doc: _Doc, name: str, node) -> object:
    """An env value exactly as Ray 2.60.0 reads it: a unit suffix that Ray would
    choke on is an error here too."""
    knob = ENV_KNOBS[name]
    raw = doc.scalar(node)
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise doc.error(
            node,
            f"{name}: give the value as Ray sees it in the environment, "
            f'e.g. "30" (quote it), not {raw!r}',
        )
    text = str(raw)
    if knob.parse == "flag":
        if text != "1":
            raise doc.error(
                node,
                f"{name}={text!r}: Serve runs HAProxy only when it is exactly "
                f'"1" ({knob.where}); this checker is for that mode',
            )
        return None
    if knob.parse == "any":
        return None
    if knob.parse == "int-or-empty" and text == "":
        return None
    try:
        value = int(text) if knob.parse.startswith("int") else float(text)
    except ValueError:
        kind, want = (
            ("int()", "whole seconds") if knob.parse.startswith("int") else ("float()", "seconds")
        )
        consequence = (
            f"Ray logs a warning and silently uses {knob.default}"
            if knob.parse == "core-float"
            else "Ray fails at import"
        )
        raise doc.error(
            node,
            f"{name}={text!r}: Ray 2.60.0 reads it with {kind}, which "
            f"rejects it ({consequence}); give {want}, no unit",
        ) from None
    if not math.isfinite(value):
        raise doc.error(node, f"{name}={text!r}: not a usable number of seconds")
    if knob.parse == "float>0" and value <= 0 or knob.parse.endswith(">=0") and value < 0:
        raise doc.error(
            node,
            f"{name}={text!r}: Ray 2.60.0 requires a "
            f"{'positive' if knob.parse == 'float>0' else 'non-negative'} "
            f"value and fails at import",
        )
    # Ray passes these through, but HAProxy refuses a negative time and a negative
    # drain period is none at all. (<= 0 is how the SIGTERM drain is turned off.)
    if value < 0 and knob.parse != "core-float":
        raise doc.error(node, f"{name}={text!r}: a negative time; write 0 if you mean none")
    return value


def _env_fields(doc: _Doc, group: str, node) -> tuple[dict, list]:
    """(Ladder fields, input rows) of one node group's env."""
    env = doc.mapping(node, f"node_env.{group}", tuple(ENV_KNOBS))
    if "RAY_SERVE_ENABLE_HA_PROXY" not in env:
        raise doc.error(
            node,
            f'node_env.{group}: set RAY_SERVE_ENABLE_HA_PROXY: "1"; Ray\'s '
            f'default is "0" ({ENV_KNOBS["RAY_SERVE_ENABLE_HA_PROXY"].where})'
            f" and this checker is for Serve behind HAProxy",
        )
    values, rows = {}, []
    for name, knob in ENV_KNOBS.items():
        if name in env:
            value, where = _parse_env(doc, name, env[name][1]), doc.line(env[name][1])
        else:
            value, where = knob.default, f"Ray 2.60.0 default ({knob.where})"
        if knob.field is None:
            continue
        shown = "unset" if value is None else f"{_num(value)} s"
        if (
            knob.field
            in (
                "haproxy_timeout_server_s",
                "haproxy_hard_stop_after_s",
                "haproxy_timeout_connect_s",
            )
            and value == 0
        ):
            # Ray renders `... 0s`, which HAProxy reads as no timeout at all.
            value, shown = None, "0 s = none"
        if knob.field == "port_quarantine_s" and value is None:
            shown = "hard-stop-after + 30"
        values[knob.field] = value
        rows.append((name, shown, where))
    return values, rows


def _optional_duration(
    doc: _Doc,
    section: dict,
    key: str,
    where: str,
    ladder_field: str,
    label: str,
    values: dict,
    rows: list,
) -> None:
    if key in section:
        values[ladder_field] = doc.duration(section[key][1], f"{where}.{key}")
        rows.append((label, f"{_num(values[ladder_field])} s", doc.line(section[key][1])))
    else:
        values[ladder_field] = None
        rows.append((label, "?", f"not given: set by {SET_BY[ladder_field]}"))


def _shared_fields(doc: _Doc, top: dict) -> tuple[dict, list]:
    """Ladder fields and input rows of everything but the env."""
    values, rows = {}, []
    empty = {}

    http = (
        doc.mapping(top["http_options"][1], "http_options", _HTTP)
        if "http_options" in top
        else empty
    )
    if "request_timeout_s" in http:
        node = http["request_timeout_s"][1]
        raw = doc.scalar(node)
        values["request_timeout_s"] = (
            None if raw is None else doc.duration(node, "http_options.request_timeout_s")
        )
        where = doc.line(node)
    else:
        values["request_timeout_s"] = None
        where = "Ray 2.60.0 default (ray/serve/config.py:883)"
    shown = (
        "unset" if values["request_timeout_s"] is None else f"{_num(values['request_timeout_s'])} s"
    )
    rows.append(("http_options.request_timeout_s", shown, where))
    if "keep_alive_timeout_s" in http:
        node = http["keep_alive_timeout_s"][1]
        values["keep_alive_timeout_s"] = doc.duration(node, "http_options.keep_alive_timeout_s")
        where = doc.line(node)
    else:
        values["keep_alive_timeout_s"] = RAY_KEEP_ALIVE_DEFAULT_S
        where = "Ray 2.60.0 default (ray/serve/config.py:884, ray/serve/_private/constants.py:60)"
    rows.append(
        (
            "http_options.keep_alive_timeout_s",
            f"{_num(values['keep_alive_timeout_s'])} s (C's idle window)",
            where,
        )
    )

    if "deployments" not in top:
        raise doc.error(
            doc.root,
            "deployments: missing; name at least the ingress deployment (see examples/ladder/)",
        )
    deployments = []
    for name, (key_node, node) in doc.mapping(top["deployments"][1], "deployments", None).items():
        where = f"deployments.{name}"
        options = doc.mapping(node, where, _DEPLOYMENT)
        if "ingress" not in options:
            raise doc.error(
                key_node,
                f"{where}: say `ingress: true` or `ingress: false`: only "
                f"ingress deployments get the drain window and the floor",
            )
        ingress = doc.scalar(options["ingress"][1])
        if not isinstance(ingress, bool):
            raise doc.error(
                options["ingress"][1], f"{where}.ingress: true or false, not {ingress!r}"
            )
        d = {"name": name, "ingress": ingress}
        for key, attr, default, cite in (
            (
                "graceful_shutdown_timeout_s",
                "graceful_shutdown_s",
                RAY_GST_DEFAULT_S,
                "ray/serve/_private/constants.py:270",
            ),
            (
                "graceful_shutdown_wait_loop_s",
                "wait_loop_s",
                RAY_WAIT_LOOP_DEFAULT_S,
                "ray/serve/_private/constants.py:271",
            ),
        ):
            if key in options:
                d[attr] = doc.duration(options[key][1], f"{where}.{key}")
                source = doc.line(options[key][1])
            else:
                d[attr], source = default, f"Ray 2.60.0 default ({cite})"
                if attr == "graceful_shutdown_s":
                    d["gst_in_config"] = False
            rows.append((f"{where}.{key}", f"{_num(d[attr])} s", source))
        deployments.append(Deployment(**d))
    if not any(d.ingress for d in deployments):
        raise doc.error(
            top["deployments"][1],
            "deployments: none is `ingress: true`; the ladder is about the ingress deployment",
        )
    values["deployments"] = tuple(deployments)

    app = doc.mapping(top["app"][1], "app", _APP) if "app" in top else empty
    _optional_duration(
        doc, app, "longest_request", "app", "long_runner_s", "app.longest_request", values, rows
    )
    _optional_duration(
        doc, app, "client_timeout", "app", "client_timeout_s", "app.client_timeout", values, rows
    )

    spot = doc.mapping(top["spot"][1], "spot", _SPOT) if "spot" in top else empty
    if "drain_deadline" in spot and "sigterm_grace" in spot:
        raise doc.error(
            spot["sigterm_grace"][0],
            "spot: give drain_deadline (a DrainNode with a "
            "deadline) or sigterm_grace (a SIGTERM), "
            "not both",
        )
    _optional_duration(doc, spot, "notice", "spot", "notice_s", "spot.notice", values, rows)
    _optional_duration(
        doc, spot, "detection", "spot", "detection_s", "spot.detection", values, rows
    )
    if "sigterm_grace" in spot:
        _optional_duration(
            doc,
            spot,
            "sigterm_grace",
            "spot",
            "sigterm_grace_s",
            "spot.sigterm_grace",
            values,
            rows,
        )
        values["drain_deadline_s"] = None
    else:
        _optional_duration(
            doc,
            spot,
            "drain_deadline",
            "spot",
            "drain_deadline_s",
            "spot.drain_deadline",
            values,
            rows,
        )
        values["sigterm_grace_s"] = None

    lb = (
        doc.mapping(top["load_balancer"][1], "load_balancer", _LB)
        if "load_balancer" in top
        else empty
    )
    _optional_duration(
        doc,
        lb,
        "deregistration",
        "load_balancer",
        "lb_deregistration_s",
        "load_balancer.deregistration",
        values,
        rows,
    )

    if "margin" in top:
        values["margin_s"] = doc.duration(top["margin"][1], "margin")
        rows.append(("margin", f"{_num(values['margin_s'])} s", doc.line(top["margin"][1])))
    else:
        values["margin_s"] = 1.0
        rows.append(("margin", "1 s", "checker default (ordering E's slack, about 1 s)"))
    return values, rows


@dataclass(frozen=True)
class LadderCheck:
    """The orderings of a service description, once per distinct node env."""

    path: Path
    groups: tuple[tuple[str, Ladder], ...]  # (node groups, their ladder)
    env_differences: tuple[str, ...]  # one line per env var the node groups disagree on

    def results(self) -> list[tuple[str, Ordering]]:
        return [(label, o) for label, ladder in self.groups for o in ladder.orderings()]

    @property
    def exit_code(self) -> int:
        """0: every ordering holds; 1: one fails; 3: none fails, some are unknown.
        (2 is the CLI's code for a description it cannot read.)"""
        statuses = {o.status for _, o in self.results()}
        if self.env_differences or "fail" in statuses:
            return 1
        return 3 if "unknown" in statuses else 0

    def render(self) -> str:
        out = [f"ladder check: {self.path} (Ray 2.60.0, Serve behind HAProxy)"]
        if self.env_differences:
            out += [
                "",
                "env  FAIL  the nodes' envs differ; Ray reads them in every process, so "
                "set them identically on every node:",
            ]
            out += [f"       {line}" for line in self.env_differences]
        for label, ladder in self.groups:
            out += ["", f"{label}", "  inputs"]
            name_w = max(len(name) for name, _, _ in ladder.inputs)
            value_w = max(len(value) for _, value, _ in ladder.inputs)
            out += [
                f"    {name:<{name_w}}  {value:<{value_w}}  {where}"
                for name, value, where in ladder.inputs
            ]
            out.append("  orderings")
            orderings = ladder.orderings()
            key_w = max(len(o.key) for o in orderings)
            indent = " " * (4 + key_w + 2 + 8 + 1)
            for o in orderings:
                out.append(f"    {o.key:<{key_w}}  {o.status.upper():<8} {o.title}")
                if o.not_applicable:
                    out.append(f"{indent}{o.not_applicable}")
                out += [f"{indent}{c.text}" for c in o.checks]
                out += [f"{indent}note: {n}" for n in o.notes]
        failed = sorted({o.key for _, o in self.results() if o.status == "fail"}, key=_order)
        unknown = sorted({o.key for _, o in self.results() if o.status == "unknown"}, key=_order)
        if self.env_differences:
            failed.insert(0, "env")
        verdict = {0: "PASS: every ordering holds", 1: "FAIL", 3: "UNKNOWN: no ordering fails"}
        parts = [verdict[self.exit_code]]
        if failed:
            parts.append(f"failing: {', '.join(failed)}")
        if unknown:
            parts.append(f"unknown (give the missing values): {', '.join(unknown)}")
        out += ["", f"result: {'; '.join(parts)} (exit {self.exit_code})"]
        return "\n".join(out)


def _order(key: str) -> tuple[str, str]:
    return key[0], key


def check_file(path: Path) -> LadderCheck:
    """Read a service description and check its ladder; HarnessError (naming the
    line) when the file cannot be read as one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HarnessError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start}; is it a binary file?); give a YAML service "
            f"description in UTF-8, like those in examples/ladder/. Nothing "
            f"was checked."
        ) from None
    doc = _Doc(path, text)
    top = doc.mapping(doc.root, "the file", _TOP)
    if "node_env" not in top:
        raise doc.error(
            doc.root,
            "node_env: missing; give each node group's `ray start` env (see examples/ladder/)",
        )
    groups = doc.mapping(top["node_env"][1], "node_env", None)
    if not groups:
        raise doc.error(top["node_env"][1], "node_env: name at least one node group")
    shared, shared_rows = _shared_fields(doc, top)

    env_by_group = {group: _env_fields(doc, group, node) for group, (_, node) in groups.items()}
    # Node groups with the same env share one ladder; differing ones each get theirs.
    ladders: dict[tuple, tuple[list[str], Ladder]] = {}
    for group, (values, rows) in env_by_group.items():
        key = tuple(sorted(values.items()))
        if key not in ladders:
            ladders[key] = ([], Ladder(**values, **shared, inputs=tuple(rows + shared_rows)))
        ladders[key][0].append(group)
    differences = []
    for name, knob in ENV_KNOBS.items():
        if knob.field and len({values[knob.field] for values, _ in env_by_group.values()}) > 1:
            shown = {
                g: dict((n, v) for n, v, _ in rows)[name] for g, (_, rows) in env_by_group.items()
            }
            differences.append(f"{name}: " + ", ".join(f"{g} {v}" for g, v in shown.items()))
    one = len(ladders) == 1
    labelled = tuple(
        (f"nodes {', '.join(names)}" + (": one env" if one else ""), ladder)
        for names, ladder in ladders.values()
    )
    return LadderCheck(path, labelled, tuple(differences))
