"""The timeout ladder of seed 002 (node retirement inside a spot notice), and
the one factor that scales it down for short test runs.

Scaling multiplies every time by one factor, so every ordering between them
holds at any scale. Two of Ray's values do not scale because they are
constants in 2.60.0 (SHUTDOWN_BUFFER_S = 5, PROXY_DRAIN_CHECK_PERIOD_S = 5);
`orderings()` checks the scaled ladder against them too, so a factor that
would break an ordering is refused rather than silently run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from harness.errors import HarnessError
from harness.nemesis import SpotNotice

SHUTDOWN_BUFFER_S = 5.0  # serve/_private/constants.py, not configurable in 2.60.0
PROXY_DRAIN_CHECK_PERIOD_S = 5.0  # idem


@dataclass(frozen=True)
class Ladder:
    long_runner_s: float = 20.0  # the app's longest request
    long_runner_min_s: float = 8.0
    request_timeout_s: float = 26.0  # http_options.request_timeout_s
    haproxy_timeout_server_s: float = 28.0  # RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S (int)
    haproxy_hard_stop_after_s: float = 30.0  # RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S (int)
    min_draining_s: float = 30.0  # RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S
    proxy_min_draining_s: float = 30.0  # RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S
    wait_loop_s: float = 2.0  # graceful_shutdown_wait_loop_s
    margin_s: float = 1.0  # the slack orderings E and F leave (scales with the rest)
    # Ordering E (missing from seed 002): a request admitted at the end of the
    # drain window must finish before the force-kill: MIN + timeout + loop + margin.
    graceful_shutdown_s: float = 59.0
    notice: SpotNotice = SpotNotice(120.0, 10.0, 60.0)

    def scaled(self, factor: float) -> Ladder:
        if factor <= 0:
            raise HarnessError(f"ladder scale factor must be positive, got {factor}")
        fields = {name: getattr(self, name) * factor for name in (
            "long_runner_s", "long_runner_min_s", "request_timeout_s",
            "min_draining_s", "proxy_min_draining_s", "wait_loop_s", "margin_s",
            "graceful_shutdown_s")}
        # HAProxy's two knobs are integers in Ray; round them the safe way.
        fields["haproxy_timeout_server_s"] = math.ceil(self.haproxy_timeout_server_s * factor)
        fields["haproxy_hard_stop_after_s"] = math.floor(self.haproxy_hard_stop_after_s * factor)
        notice = SpotNotice(self.notice.notice_s * factor, self.notice.detection_s * factor,
                            self.notice.drain_deadline_s * factor)
        ladder = replace(self, notice=notice, **fields)
        broken = [o for o in ladder.orderings() if not o[3]]
        if broken:
            raise HarnessError(f"scaling the ladder by {factor} breaks "
                               + "; ".join(f"{name}: {lhs} vs {rhs}"
                                           for name, lhs, rhs, _ in broken))
        return ladder

    def orderings(self) -> list[tuple[str, float, float, bool]]:
        """(name, left, right, holds) for the orderings of specs section 4.2."""
        gst_floor = max(self.graceful_shutdown_s, self.min_draining_s + SHUTDOWN_BUFFER_S)
        e_needs = self.min_draining_s + self.request_timeout_s + self.wait_loop_s + self.margin_s
        n = self.notice
        return [
            ("A long-runner < request_timeout_s", self.long_runner_s, self.request_timeout_s,
             self.long_runner_s < self.request_timeout_s),
            ("B request_timeout_s < timeout server", self.request_timeout_s,
             self.haproxy_timeout_server_s,
             self.request_timeout_s < self.haproxy_timeout_server_s),
            ("C timeout server < hard-stop-after", self.haproxy_timeout_server_s,
             self.haproxy_hard_stop_after_s,
             self.haproxy_timeout_server_s < self.haproxy_hard_stop_after_s),
            ("D hard-stop-after <= MIN_DRAINING", self.haproxy_hard_stop_after_s,
             self.min_draining_s, self.haproxy_hard_stop_after_s <= self.min_draining_s),
            ("E gst >= MIN + request_timeout + wait_loop + margin", gst_floor, e_needs,
             gst_floor >= e_needs),
            ("F drain deadline >= gst + margin (controller sees the drain)", n.drain_deadline_s,
             gst_floor + self.margin_s, n.drain_deadline_s >= gst_floor + self.margin_s),
            ("G proxy drain fits the deadline", self.proxy_min_draining_s
             + PROXY_DRAIN_CHECK_PERIOD_S, n.drain_deadline_s,
             self.proxy_min_draining_s + PROXY_DRAIN_CHECK_PERIOD_S < n.drain_deadline_s),
            ("H detection + drain deadline <= notice", n.detection_s + n.drain_deadline_s,
             n.notice_s, n.detection_s + n.drain_deadline_s <= n.notice_s),
        ]

    def node_env(self) -> dict[str, str]:
        return {
            "RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S": str(int(self.haproxy_timeout_server_s)),
            "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": str(int(self.haproxy_hard_stop_after_s)),
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": f"{self.min_draining_s:g}",
            "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": f"{self.proxy_min_draining_s:g}",
        }

    def deployment_options(self) -> dict:
        return {"graceful_shutdown_timeout_s": self.graceful_shutdown_s,
                "graceful_shutdown_wait_loop_s": self.wait_loop_s}

    def http_options(self) -> dict:
        return {"request_timeout_s": self.request_timeout_s}
