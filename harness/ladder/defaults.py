"""Ray 2.60.0's values that the timeout ladder models: the defaults of its
knobs, the constants that are not knobs, the env vars a node sets them with
(how Ray parses each, and where), and what fixes a value Ray leaves to the
environment.

Read in the stock wheel (build/wheelhouse/ray-2.60.0/ray-2.60.0-*.whl), not in
.venv, which may carry this project's patches; paths in comments are relative
to the wheel's `ray/`.
"""

from __future__ import annotations

from dataclasses import dataclass

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
RAY_TIMEOUT_CLIENT_DEFAULT_S = 3600  # serve/_private/constants.py:897-899
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


@dataclass(frozen=True)
class EnvKnob:
    """A node env var the ladder reads, as Ray 2.60.0 reads it."""

    field: str | None  # the Ladder field it sets; None: checked, not modelled
    parse: str  # how Ray 2.60.0 parses it
    default: float | None  # when unset; a flag's is 0, off
    where: str  # the default's file:line in the 2.60.0 wheel


ENV_KNOBS = {
    "RAY_SERVE_ENABLE_HA_PROXY": EnvKnob(None, "flag", 0, "ray/serve/_private/constants.py:752"),
    # HAProxy mode forces direct ingress on whatever this says (constants.py:1126-1128).
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": EnvKnob(
        None, "any", 0, "ray/serve/_private/constants.py:747-749"
    ),
    "RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S": EnvKnob(
        "haproxy_timeout_server_s", "int-or-empty", None, "ray/serve/_private/constants.py:864-869"
    ),
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": EnvKnob(
        "haproxy_hard_stop_after_s",
        "int",
        RAY_HARD_STOP_AFTER_DEFAULT_S,
        "ray/serve/_private/constants.py:803-805",
    ),
    "RAY_SERVE_HAPROXY_CLOSE_SPREAD_TIME_S": EnvKnob(
        "haproxy_close_spread_s", "int", None, "ray/serve/_private/constants.py:816-818"
    ),
    # On only when it is "1", the default; renders `option idle-close-on-response` (C).
    "RAY_SERVE_ENABLE_HAPROXY_OPTIMIZED_CONFIG": EnvKnob(
        "haproxy_idle_close_on_response",
        "is-1",
        1,
        "ray/serve/_private/constants.py:788-790",
    ),
    # `timeout client`: how long a connection that has not sent a request
    # yet stays open on a soft-stopped worker without close-spread-time (C).
    "RAY_SERVE_HAPROXY_TIMEOUT_CLIENT_S": EnvKnob(
        "haproxy_timeout_client_s",
        "int",
        RAY_TIMEOUT_CLIENT_DEFAULT_S,
        "ray/serve/_private/constants.py:897-899",
    ),
    "RAY_SERVE_HAPROXY_TIMEOUT_CONNECT_S": EnvKnob(
        "haproxy_timeout_connect_s",
        "int>=0",
        RAY_TIMEOUT_CONNECT_DEFAULT_S,
        "ray/serve/_private/constants.py:880-882",
    ),
    "RAY_SERVE_HAPROXY_RETRIES": EnvKnob(
        "haproxy_retries", "int>=0", None, "ray/serve/_private/constants.py:965"
    ),
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": EnvKnob(
        "min_draining_s",
        "float",
        RAY_MIN_DRAINING_DEFAULT_S,
        "ray/serve/_private/constants.py:1080-1082",
    ),
    "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": EnvKnob(
        "proxy_min_draining_s",
        "float>0",
        RAY_PROXY_MIN_DRAINING_DEFAULT_S,
        "ray/serve/_private/constants.py:320-322",
    ),
    "RAY_SERVE_PORT_QUARANTINE_S": EnvKnob(
        "port_quarantine_s", "float>=0", None, "ray/serve/_private/constants.py:1072-1075"
    ),
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": EnvKnob(
        "sigterm_drain_timeout_s",
        "core-float",
        RAY_SIGTERM_DRAIN_DEFAULT_S,
        "ray/_private/ray_constants.py:41-43",
    ),
}
